"""Callbacks whose behaviour depends on ranks, on 2 real gloo processes: weight averaging (EMA and SWA) agrees across
ranks and resumes exactly, the prediction writer writes every rank's part, the throughput monitor counts all ranks,
a loss spike on one rank makes every rank skip the step, and a ``max_overhead`` checkpoint follows rank 0's clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rank_env import torchrun_env
from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import free_port, python_command, run_processes

SCRIPT = str(Path(__file__).parent / "scripts" / "callbacks_ddp.py")


def _env(rank: int, port: int) -> dict[str, str]:
    return torchrun_env(rank, port, run_id="callbacks")


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")
    out = tmp_path_factory.mktemp("callbacks_ddp")
    port = free_port()
    run_processes([python_command(SCRIPT, str(out))] * 2, envs=[_env(0, port), _env(1, port)], timeout=300,
                  cwd=out).check()
    return out


@pytest.mark.slow
@pytest.mark.timeout(360)
@pytest.mark.parametrize("name", ["ema", "swa"])
def test_weight_averaging_ranks_agree_and_resume_exactly(out: Path, name: str) -> None:
    runs = {(run, rank): torch.load(out / f"{name}_{run}_rank{rank}.pt", weights_only=True)
            for run in ("full", "resumed") for rank in (0, 1)}
    full = runs["full", 0]
    # EMA: after each of 4 steps per epoch for 3 epochs; SWA (swa_epoch_start=2, counted from 1): at the end of
    # epochs 1 and 2 (0-based), so the resumed run (stopped after epoch 1) resumes with SWA started.
    assert full["num_averaged"] == {"ema": 12, "swa": 2}[name]
    for key in ("module", "average", "checkpoint"):
        assert _equal(full[key], runs["full", 1][key]), f"{name}: ranks disagree on {key}"
        assert _equal(full[key], runs["resumed", 0][key]), f"{name}: the resumed run's {key} differs"
    assert runs["resumed", 0]["num_averaged"] == full["num_averaged"]
    # The module ends with the averaged weights. EMA's checkpoints hold the average as their state_dict (Lightning's
    # WeightAveraging); SWA's hold the training weights with the average beside them (Lightning's SWA).
    params = [k for k in full["average"] if k in full["module"] and "running" not in k and "num_batches" not in k]
    assert all(torch.equal(full["module"][k], full["average"][k]) for k in params)
    if name == "ema":
        assert all(torch.equal(full["checkpoint"][k], full["average"][k]) for k in params)
    else:
        assert all(torch.equal(full["checkpoint_average"][k], full["average"][k]) for k in params)
        assert not all(torch.equal(full["checkpoint"][k], full["average"][k]) for k in params)


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_prediction_writer_every_rank_writes_its_part(out: Path) -> None:
    seen: list[int] = []
    for rank in (0, 1):
        epoch = torch.load(out / f"pred_epoch_rank{rank}.pt", weights_only=True)
        batches = sorted(out.glob(f"pred_batch_rank{rank}_*.pt"))
        assert len(batches) == len(epoch["predictions"]) > 0  # one dataloader: a flat list, as Lightning passes it
        for i, indices in enumerate(epoch["indices"][0]):
            one = torch.load(out / f"pred_batch_rank{rank}_{i}.pt", weights_only=True)
            assert one["indices"] == indices
            assert torch.equal(one["prediction"], epoch["predictions"][i])
            assert one["prediction"].shape[0] == len(indices)
            seen += indices
    # 41 samples on 2 ranks: 21 and 20, none predicted twice (no padding under predict, as Lightning)
    assert sorted(seen) == list(range(41)), "every sample predicted exactly once across the ranks"


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_throughput_counts_every_rank(out: Path) -> None:
    figures = [json.loads((out / f"throughput_rank{rank}.json").read_text()) for rank in (0, 1)]
    for values in figures:
        assert values["throughput/world_size"] == 2
        # 128 samples over 2 ranks, batch 16: 4 steps per rank, measured every 2 steps (32 samples per rank).
        assert values["throughput/samples"] == 128
        ratio = values["throughput/samples_per_sec"] / values["throughput/device/samples_per_sec"]
        assert ratio == pytest.approx(2.0, rel=1e-6)
        assert values["throughput/items_per_sec"] == pytest.approx(16 * values["throughput/samples_per_sec"])
        assert values["throughput/device/flops_per_sec"] > 0
    assert figures[0]["throughput/samples"] == figures[1]["throughput/samples"]


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_spike_detection_skips_on_every_rank_when_one_rank_spikes(out: Path) -> None:
    runs = [torch.load(out / f"spikes_rank{rank}.pt", weights_only=True) for rank in (0, 1)]
    for run in runs:
        assert [(s["epoch"], s["batch_idx"]) for s in run["spikes"]] == [(1, 2)]
        assert run["steps"] == 7  # 2 epochs of 4 steps, one skipped on both ranks
    assert _equal(runs[0]["weights"], runs[1]["weights"]), "the ranks must take the same decision"


@pytest.mark.timeout(360)
def test_max_overhead_checkpoint_saves_at_the_same_steps_on_every_rank(out: Path) -> None:
    # 64 samples on 2 ranks, batch 16: 2 steps an epoch, 5 epochs. Rank 0 skips every save point after the first;
    # rank 1's own rule would skip none, so without rank 0 deciding the ranks would save at different steps.
    steps = [json.loads((out / f"throttled_rank{rank}.json").read_text()) for rank in (0, 1)]
    assert steps == [[2, 10], [2, 10]]
    assert sorted(p.name for p in (out / "throttled").glob("*.ckpt")) == ["epoch=4-step=10.ckpt", "last.ckpt"]
