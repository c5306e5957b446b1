"""Plain-Python 'ranks' under the restart supervisor that fail the ways an outside trial found misreported.

    python supervised_failures.py MODE MAX_RESTARTS STATE_DIR [RUN_NAME]

MODE: ``gloo`` (rank 0 fails at step 21 with gloo's "Connection closed by peer [127.0.0.1]:PORT", a new port every
attempt), ``hang`` (rank 1 records a hang at step 21, after rank 0 recorded the gloo error its collective got when
rank 1 was ended), ``ok`` (every rank succeeds).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from xtrain.core.restarts import RESTART_COUNT_ENV, write_failure
from xtrain.strategies._internal.supervisor import supervise

if os.environ.get("SUPERVISED_RANK") is not None:  # a rank
    rank, attempt = int(os.environ["SUPERVISED_RANK"]), int(os.environ[RESTART_COUNT_ENV])
    mode, state = sys.argv[1], Path(sys.argv[3])
    (state / f"rank{rank}-attempt{attempt}").write_text(os.environ["XTRAIN_RUN_ID"])
    write_failure(rank=rank, step=None, start_step=20)
    gloo = (f"RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
            f"[127.0.0.1]:{9140 + 7919 * attempt}")
    if mode == "gloo" and rank == 0:
        write_failure(rank=0, step=21, start_step=None, error=gloo)
        sys.exit(1)
    if mode == "hang":
        if rank == 0:
            write_failure(rank=0, step=21, start_step=None, error=gloo)
        else:
            time.sleep(0.1)  # recorded after rank 0's error: the order of the records must not decide
            write_failure(rank=1, step=21, start_step=None,
                          error="Hang: no progress (stuck, not waiting for other ranks), in train at global step 21")
        sys.exit(1)
    sys.exit(0)

supervise(command=[sys.executable, *sys.argv], num_processes=2, max_restarts=int(sys.argv[2]),
          base_env=dict(os.environ), child_env=lambda local: {"SUPERVISED_RANK": str(local)},
          global_rank=lambda local: local, new_port=lambda: 12345,
          run_name=sys.argv[4] if len(sys.argv) > 4 else None)
