"""Failures an outside trial (trial C) found misreported, with two real DDP ranks (gloo) each.

* A hang in the first step is reported (naming the stuck rank) before the process-group timeout, not replaced by
  torch's timeout error on the healthy rank.
* A hang that recurs on every ``max_restarts`` attempt is recognised as the same failure, and the launcher names the
  stuck rank and the global step (not the count of every batch, sanity-check and validation ones included).
* Under ``XTRAIN_COLLECTIVE_CHECK=1`` a collective only one rank calls is a hang report, not a "dead" rank.
* SIGTERM in setup ends the job with 143, and Ctrl-C with 130 and "interrupted": neither is a rank failure.
* A rank's traceback is printed once when the ranks share a terminal.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import RunResult, leftover_processes, run_processes

SCRIPT = Path(__file__).parent / "scripts" / "trial_c_run.py"

pytestmark = [pytest.mark.timeout(240)]


@pytest.fixture(autouse=True)
def _needs_ddp() -> None:
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")


def run(tmp_path: Path, case: str, **env: str) -> tuple[RunResult, float]:
    out = tmp_path / case
    out.mkdir()
    start = time.monotonic()
    result = run_processes([[sys.executable, str(SCRIPT), json.dumps({"case": case, "out": str(out)})]],
                           timeout=180, cwd=out, envs=[{"OMP_NUM_THREADS": "1", **env}])
    took = time.monotonic() - start
    time.sleep(0.3)  # let the kernel reap what the run's last exits just ended
    assert not result.timed_out, result.output
    assert not leftover_processes(result), f"processes outlived the run:\n{result.output}"
    return result, took


def test_a_first_step_hang_is_reported_before_the_process_group_timeout(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "first_step")  # hang_timeout=6 s (4 x 6 = 24 s), process-group timeout 20 s
    output = result.output
    assert result.returncodes == [1], output
    assert "HANG DETECTED by rank 1" in output and "(limit 15 s)" in output, output
    assert re.search(r"STUCK +rank 1 .* in train at global step 0;", output), output
    assert "Timed out waiting" not in output and "rank 0 failed" not in output, output


def test_a_hang_on_every_attempt_stops_early_and_names_the_stuck_rank(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "hang_restart")
    output = result.output
    assert result.returncodes == [1], output
    launcher = re.findall(r"xtrain launcher: rank[^\n]*", output)  # anywhere: a rank's text may precede it on a line
    assert len(launcher) == 2, output
    assert all(line.startswith("xtrain launcher: rank 1 exited with code 1 (Hang: ") for line in launcher), launcher
    assert "the same failure as the previous attempt" in launcher[1] and "instead of 3" in launcher[1], launcher
    # 2 sanity-check and 2 validation batches ran before: the summary counts optimizer steps, not batches.
    assert output.count("in train at global step 7;") >= 2, output


def test_a_collective_one_rank_calls_under_the_collective_check_is_a_hang(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "check_one_rank", XTRAIN_COLLECTIVE_CHECK="1")
    output = result.output
    assert result.returncodes == [1], output
    assert "HANG DETECTED" in output and "no heartbeat" not in output, output
    assert re.search(r"waiting rank 0 .*waiting in all_reduce", output), output
    assert "no report" not in output, output


def test_sigterm_in_setup_ends_the_job_with_143_and_no_failure(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "sigterm_setup")
    output = result.output
    assert result.returncodes == [143], output
    assert "detected SIGTERM on rank 1: the run was interrupted, not failed" in output, output
    assert not re.search(r"rank \d failed", output) and "SIGTERMException" not in output, output


def test_ctrl_c_is_an_interruption_not_a_rank_failure(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "ctrl_c")
    output = result.output
    assert result.returncodes[0] in (130, -signal.SIGINT), output
    assert re.search(r"detected KeyboardInterrupt .*on rank \d: the run was interrupted, not failed|rank 1 .* was "
                     r"interrupted \(SIGINT, Ctrl-C\)", output), output
    assert not re.search(r"rank \d failed", output) and "----- rank" not in output, output
