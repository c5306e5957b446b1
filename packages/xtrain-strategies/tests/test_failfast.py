"""Fail fast: one rank raises or is SIGKILLed mid-training; every rank, on every node, is gone within 15 s.

The runs train for up to 100000 steps, so only the failure can end them. The failing rank writes the time just
before it fails; the bound is measured from there to the moment every started command has exited, and
``leftover_processes`` proves no rank (children, torchrun workers) outlived the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from strategies_helpers import Run, check_failed_fast

BOUND_S = 15.0
LONG = {"max_steps": 100_000, "batch_size": 4, "samples": 64}


@pytest.mark.parametrize("how", ["raise", "sigkill"])
@pytest.mark.parametrize("failed_rank", [1, 0])
def test_xtrain_launcher(train: Callable[..., Run], how: str, failed_rank: int) -> None:
    started = time.time()
    run = train({"strategy": "ddp", "devices": 2, **LONG, "fail": {"rank": failed_rank, "step": 3, "how": how}},
                check=False)
    if how == "sigkill" and failed_rank == 0:
        # The process the user started was killed (the shell says "Killed"); its children must die with it
        # (PR_SET_PDEATHSIG), which the fixture's leftover check has proven. Nobody is left to print anything.
        assert run.result.returncodes == [-9] and time.time() - float((run.out / "failed_at").read_text()) < BOUND_S
        return
    took = check_failed_fast(run, bound=BOUND_S, failed_rank=failed_rank, how=how, started=started)
    if how == "sigkill" and failed_rank == 1:
        assert "rank 1 (local rank 1" in run.result.output and "SIGKILL" in run.result.output
        assert run.result.returncodes == [137]
    print(f"xtrain launcher, rank {failed_rank} {how}: all stopped {took:.1f} s after the failure")


@pytest.mark.parametrize("how", ["raise", "sigkill"])
def test_torchrun(train: Callable[..., Run], how: str) -> None:
    started = time.time()
    run = train({"strategy": "ddp", "devices": 2, **LONG, "fail": {"rank": 1, "step": 3, "how": how}},
                how="torchrun", check=False)
    took = check_failed_fast(run, bound=BOUND_S, failed_rank=1, how=how, started=started)
    print(f"torchrun, rank 1 {how}: all stopped {took:.1f} s after the failure")


@pytest.mark.parametrize("how", ["raise", "sigkill"])
def test_two_nodes(train: Callable[..., Run], how: str) -> None:
    """Node 1's only rank fails: node 0 must notice through the store (no shared parent) and stop too."""
    started = time.time()
    run = train({"strategy": "ddp", "devices": 1, "num_nodes": 2, **LONG,
                 "fail": {"rank": 1, "step": 3, "how": how}}, how="two_nodes", check=False)
    took = check_failed_fast(run, bound=BOUND_S, failed_rank=1, how=how, started=started)
    if how == "raise":
        node0 = run.result.processes[0].output
        assert "rank 1 failed; stopping rank 0" in node0 and "boom from rank 1" in node0, node0
    print(f"two nodes, rank 1 {how}: all stopped {took:.1f} s after the failure")


def test_spawn_reports_the_failed_rank(train: Callable[..., Run]) -> None:
    started = time.time()
    run = train({"strategy": "ddp_spawn", "devices": 2, **LONG, "fail": {"rank": 1, "step": 3, "how": "raise"}},
                check=False)
    check_failed_fast(run, bound=BOUND_S, failed_rank=1, how="raise", started=started)
    assert "RankFailedError: rank 1 failed" in run.result.output
