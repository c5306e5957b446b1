"""Run a plain-Python 'rank' under the restart supervisor (no torch in the ranks: the restart logic alone).

    python supervised.py MODE MAX_RESTARTS STATE_DIR

MODE: ``once`` (rank 1 exits 3 on the first attempt only), ``same`` (rank 1 raises the same error at step 7 every
time), ``different`` (rank 1 fails with a new message every attempt).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from xtrain.core.restarts import RESTART_COUNT_ENV, write_failure
from xtrain.strategies._internal.supervisor import supervise

if os.environ.get("SUPERVISED_RANK") is not None:  # a rank
    rank, attempt = int(os.environ["SUPERVISED_RANK"]), int(os.environ[RESTART_COUNT_ENV])
    mode, state = sys.argv[1], Path(sys.argv[3])
    (state / f"rank{rank}-attempt{attempt}").write_text(os.environ["XTRAIN_RUN_ID"])
    write_failure(rank=rank, step=None, start_step=5)
    if rank == 1 and (mode != "once" or attempt == 0):
        error = "ValueError: bad batch" if mode == "same" else f"ValueError: attempt {attempt}"
        write_failure(rank=rank, step=7, start_step=None, error=error)
        sys.exit(3)
    sys.exit(0)

supervise(command=[sys.executable, *sys.argv], num_processes=2, max_restarts=int(sys.argv[2]),
          base_env=dict(os.environ), child_env=lambda local: {"SUPERVISED_RANK": str(local)},
          global_rank=lambda local: local, new_port=lambda: 12345)
