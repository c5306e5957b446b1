"""Hang detection: a rank that stops making progress is found, shown (every rank's stacks, one summary) and ended.

Two ranks hang the way real runs do (``scripts/hang_run.py``). With a ``hang_timeout`` of a few seconds, each run
must be detected within ``hang_timeout`` + 15 s of the moment a rank got stuck, name the stuck rank's file:line,
exit non-zero within 15 s of the detection, and leave no process behind (dataloader workers included). Runs that are
slow but progressing (a 20 s first step, a 20 s checkpoint save) must finish.

Two representative cases run by default; the full set (``-m hangs``) runs in ``nox -s hangs``, the Horovod cases
(``-m horovod``, self-launched Horovod ranks) in ``nox -s horovod``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import RunResult, free_port, leftover_processes, run_processes, torchrun_command

SCRIPT = Path(__file__).parent / "scripts" / "hang_run.py"
HANG_TIMEOUT = 5.0
BOUND_S = 15.0


def hangs(test: Any) -> Any:
    """The slow set: marked ``hangs`` and run only where ``XTRAIN_HANG_TESTS=1`` (``nox -s hangs`` sets it)."""
    run_them = os.environ.get("XTRAIN_HANG_TESTS") == "1"
    return pytest.mark.hangs(pytest.mark.skipif(not run_them, reason="slow hang tests: run nox -s hangs")(test))


@pytest.fixture(autouse=True)
def _needs_ddp() -> None:
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")


def where(case: str) -> str:
    """``hang_run.py:<line>``: the line of the script marked ``# HANG: <case>``."""
    lines = SCRIPT.read_text().splitlines()
    number = next(i for i, line in enumerate(lines, start=1) if f"# HANG: {case}" in line)
    return f"hang_run.py:{number}"


def run(tmp_path: Path, case: str, *, how: str = "python", hang_timeout: float = HANG_TIMEOUT,
        timeout: float = 150.0, **settings: Any) -> tuple[RunResult, Path, float]:
    out = tmp_path / f"{case}-{how}"
    out.mkdir()
    settings = {"case": case, "hang_timeout": hang_timeout, "out": str(out), "strategy": "ddp", "devices": 2,
                **settings}
    envs: list[dict[str, str]] = [{}]
    if how == "torchrun":
        commands = [torchrun_command(str(SCRIPT), json.dumps(settings), nproc_per_node=2)]
    elif how == "two_nodes":
        settings.update(devices=1, num_nodes=2)
        port = str(free_port())
        envs = [{"NODE_RANK": str(n), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port} for n in range(2)]
        commands = [[sys.executable, str(SCRIPT), json.dumps(settings)] for _ in range(2)]
    else:
        commands = [[sys.executable, str(SCRIPT), json.dumps(settings)]]
    result = run_processes(commands, timeout=timeout, envs=envs, cwd=out)
    ended = time.time()
    time.sleep(0.3)  # let the kernel reap what the run's last exits just ended
    assert not leftover_processes(result), f"processes outlived the run:\n{result.output}"
    return result, out, ended


def check_hang(result: RunResult, out: Path, ended: float, *, stuck_rank: int | None, case: str,
               label: str) -> tuple[float, float]:
    """The report names the stuck rank and its line; returns (detected after, ended after) the rank got stuck."""
    output = result.output
    assert not result.timed_out, output
    assert all(code not in (0, None) for code in result.returncodes), (result.returncodes, output)
    assert where(case) in output, output
    stuck_at = float((out / "stuck_at").read_text())
    took = ended - stuck_at
    found = re.search(r"HANG DETECTED by rank \d+: .*?progress for ([\d.]+) s", output)
    assert found is not None, output
    detected = float(found[1])
    assert detected <= HANG_TIMEOUT + BOUND_S, output
    assert took <= detected + BOUND_S + 2.0, f"ended {took:.1f} s after the rank got stuck:\n{output}"
    assert "xtrain hang report: stacks of rank 0" in output and "xtrain hang report: stacks of rank 1" in output
    if stuck_rank is not None:
        assert re.search(rf"STUCK +rank {stuck_rank} \(host \S+, pid \d+\)", output), output
    print(f"{label}: detected {detected:.1f} s after the last progress, every process gone {took:.1f} s after the "
          f"rank got stuck")
    return detected, took


def test_sleeping_rank_is_reported_and_ended(tmp_path: Path) -> None:
    """(a) rank 1 sleeps in training_step; rank 0 waits in backward's all-reduce."""
    result, out, ended = run(tmp_path, "sleep")
    check_hang(result, out, ended, stuck_rank=1, case="sleep", label="sleep, xtrain launcher")
    assert re.search(r"waiting rank 0 .*waiting in backward", result.output), result.output


def test_blocked_dataloader_worker_is_reported_and_ended(tmp_path: Path) -> None:
    """(b) rank 0's dataloader worker blocks forever: its stack is shown, and it is killed with the ranks."""
    result, out, ended = run(tmp_path, "worker")
    check_hang(result, out, ended, stuck_rank=0, case="worker", label="dataloader worker, xtrain launcher")
    assert "waiting for a batch from its DataLoader" in result.output
    assert "dataloader worker of rank 0" in result.output


@hangs
def test_sync_dist_log_on_one_rank(tmp_path: Path) -> None:
    """(c) ``self.log(..., sync_dist=True)`` on rank 0 only.

    Gloo notices the mismatched sizes and aborts the process (a C++ exception): faulthandler, enabled by the
    watchdog, prints its stacks; NCCL would hang instead, which the watchdog reports like the barrier case.
    """
    result, out, ended = run(tmp_path, "sync_dist")
    assert not result.timed_out and all(code not in (0, None) for code in result.returncodes), result.output
    line = where("sync_dist").split(":")[1]  # faulthandler writes File "...hang_run.py", line N in training_step
    assert where("sync_dist") in result.output or f'hang_run.py", line {line} in training_step' in result.output, \
        result.output
    took = ended - float((out / "stuck_at").read_text())
    assert took <= HANG_TIMEOUT + 2 * BOUND_S, result.output
    print(f"sync_dist on rank 0 only: every process gone {took:.1f} s after it")


@hangs
def test_barrier_in_one_branch(tmp_path: Path) -> None:
    """(d) rank 0 alone enters a barrier: both ranks wait in collectives that do not match, and the summary says so."""
    result, out, ended = run(tmp_path, "barrier")
    check_hang(result, out, ended, stuck_rank=None, case="barrier", label="barrier on rank 0 only")
    assert "do not match" in result.output
    assert "rank 0 in barrier('only on rank 0')" in result.output and "rank 1 in backward" in result.output


@hangs
def test_stuck_in_validation(tmp_path: Path) -> None:
    """(e) rank 1 sleeps in validation_step; rank 0 waits in the next collective."""
    result, out, ended = run(tmp_path, "validation")
    check_hang(result, out, ended, stuck_rank=1, case="validation", label="validation")


@hangs
@pytest.mark.parametrize("how", ["torchrun", "two_nodes", "ddp_spawn"])
def test_sleeping_rank_under_other_launchers(tmp_path: Path, how: str) -> None:
    extra = {"strategy": "ddp_spawn"} if how == "ddp_spawn" else {}
    result, out, ended = run(tmp_path, "sleep", how="python" if how == "ddp_spawn" else how, **extra)
    check_hang(result, out, ended, stuck_rank=1, case="sleep", label=f"sleep, {how}")


@hangs
def test_frozen_rank_on_another_node_ends_itself(tmp_path: Path) -> None:
    """Rank 1 (node 1) holds the GIL forever: rank 0 sees its heartbeat stop (or reports the hang) and exits; nobody
    on node 1 could end it, so faulthandler's timer, which the frozen watchdog no longer re-arms, dumps its stacks
    and exits it."""
    result, out, ended = run(tmp_path, "frozen", how="two_nodes", timeout=180.0)
    output = result.output
    assert not result.timed_out and all(code not in (0, None) for code in result.returncodes), output
    # Whichever comes first: the heartbeat timeout, or the hang report in which rank 1 cannot answer.
    assert "rank 1 is gone: no heartbeat" in output or "rank 1: no report" in output, output
    line = where("frozen").split(":")[1]
    assert f'hang_run.py", line {line} in training_step' in output, output
    took = ended - float((out / "stuck_at").read_text())
    assert took <= 6 + 30 + 5 + BOUND_S, output  # heartbeat timeout + grace + re-arm period + margin
    print(f"frozen rank on node 1: every process gone {took:.1f} s after it froze")


@hangs
def test_sleeping_rank_under_the_engine(tmp_path: Path) -> None:
    result, out, ended = run(tmp_path, "sleep", engine=True)
    check_hang(result, out, ended, stuck_rank=1, case="engine", label="sleep, Engine")


def _needs_horovod() -> None:
    if os.environ.get("XTRAIN_REQUIRE_HOROVOD") != "1":
        pytest.importorskip("horovod.torch", reason="Horovod is not installed (python tools/build_horovod.py)")


@pytest.mark.horovod
def test_sleeping_rank_under_horovod(tmp_path: Path) -> None:
    """(a) under Horovod, self-launched: rank 1 sleeps; rank 0 waits in the optimizer's gradient all-reduce."""
    _needs_horovod()
    result, out, ended = run(tmp_path, "sleep", strategy="horovod")
    check_hang(result, out, ended, stuck_rank=1, case="sleep", label="sleep, Horovod")
    assert re.search(r"waiting rank 0 .*allreduce of the gradients \(DistributedOptimizer.synchronize\)",
                     result.output), result.output


@pytest.mark.horovod
def test_barrier_in_one_branch_under_horovod(tmp_path: Path) -> None:
    """(d) under Horovod: rank 0 alone enters a barrier, rank 1 the gradient all-reduce; the summary names both."""
    _needs_horovod()
    result, out, ended = run(tmp_path, "barrier", strategy="horovod")
    check_hang(result, out, ended, stuck_rank=None, case="barrier", label="barrier on rank 0 only, Horovod")
    assert "do not match" in result.output, result.output
    assert "rank 0 in barrier('only on rank 0')" in result.output, result.output
    assert "rank 1 in allreduce of the gradients" in result.output, result.output


@hangs
@pytest.mark.parametrize(("case", "hang_timeout"), [("first_step", 10.0), ("slow_save", 10.0), ("slow_steps", 5.0),
                                                    ("preempt", 10.0)])
def test_slow_but_progressing_runs_finish(tmp_path: Path, case: str, hang_timeout: float) -> None:
    """No false alarms: a 20 s first step (within its allowance of 4 x hang_timeout), a 20 s checkpoint save that
    keeps writing, steps of 3 s with hang_timeout=5, and a preemption that saves on that slow disk."""
    result, out, _ = run(tmp_path, case, hang_timeout=hang_timeout)
    assert "HANG DETECTED" not in result.output
    if case == "preempt":  # fit raises SIGTERMException on every rank once last.ckpt is saved: exit code 143
        assert result.returncodes == [143] and not list(out.glob("finished_rank*")), result.output
        assert "failed" not in result.output, result.output
    else:
        assert result.returncodes == [0], result.output
        assert sorted(p.name for p in out.glob("finished_rank*")) == ["finished_rank0", "finished_rank1"]
    if case == "slow_save":
        assert (out / "slow.ckpt").stat().st_size > 0
    if case == "preempt":
        assert "preemption signal (SIGTERM) received" in result.output and (out / "checkpoints" / "last.ckpt").exists()
