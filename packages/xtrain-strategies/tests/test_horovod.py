"""Horovod for real: 2 CPU ranks over Gloo, started by xtrain itself, by ``horovodrun`` and by ``mpirun``.

Every run is compared with ``ddp`` on the same data: the weights must agree to 1e-6 (in practice they are
bit-identical: both average two float32 gradients). These tests need Horovod built against the installed torch
(``nox -s horovod`` builds it with ``tools/build_horovod.py``); elsewhere they skip, saying so.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from strategies_helpers import SCRIPTS, TIMEOUT, Run, assert_close, check_failed_fast, horovod_missing
from xtrain.core.testing import StrategyConformance, leftover_processes, run_processes

pytestmark = [pytest.mark.horovod, pytest.mark.skipif(horovod_missing() is not None,
                                                       reason=horovod_missing() or "")]

TOL = 1e-6
BASE: dict[str, Any] = {"max_steps": 6, "batch_size": 8, "devices": 2}


@pytest.fixture(scope="module")
def ddp_runs() -> dict[str, Run]:
    """DDP references, filled on first use by :func:`_reference`."""
    return {}


def _reference(train: Callable[..., Run], cache: dict[str, Run], settings: dict[str, Any]) -> Run:
    key = repr(sorted(settings.items()))
    if key not in cache:
        cache[key] = train({**settings, "strategy": "ddp"})
    return cache[key]


def _agree(run: Run, reference: Run, tol: float = TOL) -> None:
    assert [r["rank"] for r in run.records] == [0, 1] and {r["strategy"] for r in run.records} == {"HorovodStrategy"}
    for r in run.records:
        assert_close(run.params(r["rank"]), run.params(0), tol=0.0)  # ranks stay identical
        assert_close(run.params(r["rank"]), reference.params(0), tol=tol)
        assert r["global_step"] == reference.records[0]["global_step"]
        assert r["all_gather"] == [[0.0, 10.0], [1.0, 11.0]]
        assert r["metrics"]["rank_value"] == 1.0  # sync_dist sum of ranks 0 and 1


ENVIRONMENTS = {"python": {"LocalEnvironment", "HorovodEnvironment"}, "horovodrun": {"HorovodEnvironment"},
                "mpirun": {"MPIEnvironment"}}


@pytest.mark.parametrize("how", ["python", "horovodrun", "mpirun"])
def test_launch_modes_train_to_ddp_weights(train: Callable[..., Run], ddp_runs: dict[str, Run], how: str) -> None:
    """``python script.py`` (xtrain starts the ranks with Horovod's rendezvous), ``horovodrun --gloo``, ``mpirun``."""
    run = train({**BASE, "strategy": "horovod"}, how=how)
    assert {r["environment"] for r in run.records} == ENVIRONMENTS[how]
    _agree(run, _reference(train, ddp_runs, BASE))


def test_gradient_accumulation_uses_backward_passes_per_step(train: Callable[..., Run],
                                                            ddp_runs: dict[str, Run]) -> None:
    """Windows of 3 batches, and a shorter last window at each epoch end (4 batches per rank per epoch)."""
    settings = {**BASE, "accumulate": 3, "max_steps": 4, "samples": 64}
    run = train({**settings, "strategy": "horovod"})
    _agree(run, _reference(train, ddp_runs, settings))
    assert run.records[0]["global_step"] == 4


def test_fp16_compression_trains_close_to_ddp(train: Callable[..., Run], ddp_runs: dict[str, Run]) -> None:
    run = train({**BASE, "strategy": "horovod", "strategy_options": {"compression": "fp16"}})
    reference = _reference(train, ddp_runs, BASE)
    with pytest.raises(AssertionError):
        _agree(run, reference, tol=0.0)  # the gradients really travelled as float16
    _agree(run, reference, tol=1e-3)


def test_bf16_true_trains_although_horovod_has_no_bfloat16(train: Callable[..., Run],
                                                          ddp_runs: dict[str, Run]) -> None:
    """Horovod's torch operations lack bfloat16: parameters are broadcast as their bits, gradients summed in float32.

    Found by the matrix: ``precision="bf16-true"`` failed at the first broadcast. DDP sums bfloat16 gradients in
    bfloat16, so the two agree to bfloat16's resolution, not bitwise.
    """
    settings = {**BASE, "precision": "bf16-true"}
    run = train({**settings, "strategy": "horovod"})
    reference = _reference(train, ddp_runs, settings)
    for r in run.records:
        assert_close(run.params(r["rank"]), run.params(0), tol=0.0)
    assert_close(run.params(0), reference.params(0), tol=2e-2)
    assert run.records[0]["global_step"] == reference.records[0]["global_step"] == 6


def test_lr_scheduler_follows_the_wrapped_optimizer(train: Callable[..., Run], ddp_runs: dict[str, Run]) -> None:
    settings = {**BASE, "scheduler": True}
    run = train({**settings, "strategy": "horovod"})
    _agree(run, _reference(train, ddp_runs, settings))
    assert all(r["lrs"] == [0.05 * 0.5**3] for r in run.records)
    assert "lr_scheduler.step()" not in run.result.output, run.result.output


def test_second_fit_continues_like_ddp(train: Callable[..., Run]) -> None:
    """The launched ranks, the wrapped optimizers and the watchdog store serve a second ``fit`` in the same script."""
    runs = {name: train({**BASE, "max_steps": 4, "strategy": name, "second_fit": True}) for name in ("horovod", "ddp")}
    horovod, ddp = (torch.load(r.out / "second_fit.pt") for r in runs.values())
    assert (runs["horovod"].out / "second_fit_step.txt").read_text() == "8"
    assert_close(horovod, ddp, tol=TOL)


def test_uneven_inputs_join_and_continue_together(train: Callable[..., Run]) -> None:
    """Rank 0 has 2 more batches per epoch: rank 1 joins and serves its all-reduces; both end identical."""
    run = train({"strategy": "horovod", "devices": 2, "uneven": 2, "epochs": 2, "max_steps": -1, "batch_size": 8,
                 "samples": 64, "use_distributed_sampler": False})
    steps = [r["global_step"] for r in run.records]
    assert steps == [2 * (4 + 2)] * 2, steps
    assert_close(run.params(1), run.params(0), tol=0.0)
    assert [len(r["seen"]) for r in run.records] == [12, 8]


class TestHorovodConformance(StrategyConformance):
    strategy = "horovod"
    devices = 2


@pytest.mark.parametrize(("failed_rank", "how"), [(1, "raise"), (1, "sigkill"), (0, "raise"), (0, "sigkill")])
def test_fail_fast_under_the_xtrain_launcher(train: Callable[..., Run], failed_rank: int, how: str) -> None:
    started = time.time()
    run = train({"strategy": "horovod", "devices": 2, "max_steps": 100_000, "batch_size": 4, "samples": 64,
                 "fail": {"rank": failed_rank, "step": 3, "how": how}}, check=False)
    if (failed_rank, how) == (0, "sigkill"):
        # The process the user started (rank 0, host of the rendezvous) was killed; rank 1 dies with it
        # (PR_SET_PDEATHSIG), which the fixture's leftover check proves. Nobody is left to print anything.
        assert run.result.returncodes == [-9] and time.time() - float((run.out / "failed_at").read_text()) < 15
        return
    took = check_failed_fast(run, failed_rank=failed_rank, how=how, started=started)
    print(f"horovod (xtrain launcher), rank {failed_rank} {how}: all stopped {took:.1f} s after the failure")


def test_fail_fast_under_horovodrun(train: Callable[..., Run]) -> None:
    """horovodrun ends the job when a rank exits; the watchdog names the failed rank's traceback on the others."""
    started = time.time()
    run = train({"strategy": "horovod", "devices": 2, "max_steps": 100_000, "batch_size": 4, "samples": 64,
                 "fail": {"rank": 1, "step": 3, "how": "raise"}}, how="horovodrun", check=False)
    took = check_failed_fast(run, failed_rank=1, how="raise", started=started)
    print(f"horovodrun, rank 1 raise: all stopped {took:.1f} s after the failure")


def test_engine_accumulates_and_gathers_odd_dtypes(tmp_path: Path) -> None:
    """The Engine with ``backward_passes_per_step=2`` matches DDP with ``no_backward_sync``; bfloat16 and bool go
    through reduce/all_gather although Horovod's CPU operations have neither."""
    records = {}
    for name in ("horovod", "ddp"):
        out = tmp_path / name
        out.mkdir()
        result = run_processes([[sys.executable, str(SCRIPTS / "engine_accumulate.py"), name, str(out)]],
                               timeout=TIMEOUT, cwd=out).check()
        assert not leftover_processes(result)
        records[name] = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    for hvd, ddp in zip(records["horovod"], records["ddp"], strict=True):
        for a, b in zip(hvd.pop("params"), ddp.pop("params"), strict=True):
            assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= TOL
        assert hvd == ddp
    assert records["horovod"][0]["bf16_gather"] == [[1.5], [2.5]] and records["horovod"][1]["bool_gather"] == [
        [True], [False]]
