"""The exit codes a job's processes end with when one rank fails, under a launcher that ends the others with
SIGTERM at the first failure (``srun --kill-on-bad-exit``, torchrun): 1, never 143.

143 is a preempted job's code, which schedulers requeue (``RequeueExit=143``): a failed run must not look like one.
The launcher is emulated here (SLURM's own runs in ``test_slurm.py``); the ranks are real processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rank_env import torchrun_env
from xtrain.core.testing.processes import free_port

SCRIPT = str(Path(__file__).parent / "scripts" / "fail_slow_teardown.py")


@pytest.mark.timeout(180)
def test_a_failed_rank_terminated_by_the_launcher_exits_1_not_143(tmp_path: Path) -> None:
    port = free_port()
    procs = [subprocess.Popen([sys.executable, SCRIPT, str(tmp_path)], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, env={**os.environ, **torchrun_env(rank, port, run_id="codes")})
             for rank in (0, 1)]
    deadline = time.monotonic() + 150
    try:
        while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        first = next((i for i, p in enumerate(procs) if p.returncode not in (None, 0)), None)
        for p in procs:  # as srun --kill-on-bad-exit: the first non-zero exit ends the others with SIGTERM
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    output = "".join(p.stdout.read().decode(errors="replace") for p in procs if p.stdout is not None)
    assert first is not None, output
    assert "rank 1 failed on purpose" in output and "rank 1 in on_exception" in output, output
    assert codes == [1, 1], (codes, output)  # rank 0 ended by its watchdog, rank 1 by the SIGTERM while failing
