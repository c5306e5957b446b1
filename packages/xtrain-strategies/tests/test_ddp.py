"""DDP trains for real: 2 gloo processes match 1 process of the same global batch, ranks agree, data is sharded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from torch.utils.data import DistributedSampler

from strategies_helpers import Run, assert_close

SAMPLES, BATCH, STEPS = 64, 8, 10


def _check_ranks_agree(run: Run, world: int) -> None:
    assert [r["rank"] for r in run.records] == list(range(world))
    for r in run.records:
        assert_close(run.params(r["rank"]), run.params(0), tol=0.0)  # DDP keeps ranks bit-identical
        assert r["all_gather"] == [[float(i), 10.0 + i] for i in range(world)]
        assert r["metrics"]["rank_value"] == sum(range(world))  # sync_dist=True, reduce_fx="sum"
        assert r["metrics"]["synced_loss"] == run.records[0]["metrics"]["synced_loss"]


def test_two_processes_match_one_process_of_the_global_batch(train: Callable[..., Run]) -> None:
    ddp = train({"strategy": "ddp", "devices": 2, "max_steps": STEPS, "batch_size": BATCH, "samples": SAMPLES})
    single = train({"devices": 1, "max_steps": STEPS, "batch_size": 2 * BATCH, "samples": SAMPLES})
    assert ddp.records[0]["world_size"] == 2 and ddp.records[0]["strategy"] == "DDPStrategy"
    _check_ranks_agree(ddp, 2)
    assert_close(ddp.params(0), single.params(0), tol=1e-6)
    # Every global batch is the single run's batch, split between the ranks without overlap.
    for step in range(STEPS):
        both = sorted(ddp.records[0]["seen"][step] + ddp.records[1]["seen"][step])
        assert both == sorted(single.records[0]["seen"][step])
        assert not set(ddp.records[0]["seen"][step]) & set(ddp.records[1]["seen"][step])


@pytest.mark.parametrize("mode", ["manual", "accumulate"])
def test_manual_optimization_and_accumulation_sync_gradients(train: Callable[..., Run], mode: str) -> None:
    """Manual backward runs inside DDP's forward; accumulation skips the sync with no_sync: both must still match."""
    extra: dict[str, Any] = {"manual": True} if mode == "manual" else {"accumulate": 2}
    ddp = train({"strategy": "ddp", "devices": 2, "max_steps": 4, "batch_size": BATCH, **extra})
    single = train({"devices": 1, "max_steps": 4, "batch_size": 2 * BATCH, **extra})
    _check_ranks_agree(ddp, 2)
    assert_close(ddp.params(0), single.params(0), tol=1e-6)


def test_distributed_sampler_is_injected_and_reshuffled_every_epoch(train: Callable[..., Run]) -> None:
    run = train({"strategy": "ddp", "devices": 2, "epochs": 2, "max_steps": -1, "shuffle": True,
                 "batch_size": BATCH, "samples": SAMPLES})
    per_epoch = SAMPLES // 2 // BATCH
    for r in run.records:
        seen = [i for batch in r["seen"] for i in batch]
        for epoch in range(2):
            sampler = DistributedSampler(range(SAMPLES), num_replicas=2, rank=r["rank"], shuffle=True, seed=0)
            sampler.set_epoch(epoch)
            assert seen[epoch * per_epoch * BATCH:(epoch + 1) * per_epoch * BATCH] == list(sampler)
    first = [i for batch in run.records[0]["seen"][:per_epoch] for i in batch]
    second = [i for batch in run.records[0]["seen"][per_epoch:] for i in batch]
    assert first != second, "set_epoch was not called: epoch 2 repeated epoch 1's order"
    epoch0 = {i for r in run.records for batch in r["seen"][:per_epoch] for i in batch}
    assert epoch0 == set(range(SAMPLES))


def test_use_distributed_sampler_false_gives_every_rank_all_data(train: Callable[..., Run]) -> None:
    run = train({"strategy": "ddp", "devices": 2, "max_steps": 2, "batch_size": BATCH,
                 "use_distributed_sampler": False})
    assert run.records[0]["seen"] == run.records[1]["seen"] == [list(range(BATCH)), list(range(BATCH, 2 * BATCH))]


def test_early_stopping_decides_on_all_ranks_at_once(train: Callable[..., Run]) -> None:
    """Only rank 1's metric passes the threshold; both ranks stop after the same epoch."""
    run = train({"strategy": "ddp", "devices": 2, "epochs": 5, "max_steps": -1, "early_stopping": True,
                 "batch_size": BATCH, "samples": 32})
    assert [r["epochs"] for r in run.records] == [[0], [0]]
    assert run.records[0]["global_step"] == run.records[1]["global_step"] == 2


def test_checkpoint_state_has_no_wrapper_prefix(train: Callable[..., Run]) -> None:
    run = train({"strategy": "ddp", "devices": 2, "max_steps": 1})
    assert run.records[0]["state_keys"] == ["net.0.bias", "net.0.weight", "net.3.bias", "net.3.weight"]


@pytest.mark.parametrize(("name", "expected"), [
    ("ddp_find_unused_parameters_false", "DDPStrategy"), ("ddp_spawn_find_unused_parameters_false", "DDPSpawnStrategy"),
    ("ddp_fork_find_unused_parameters_false", "DDPForkStrategy"),
    ("ddp_notebook_find_unused_parameters_false", "DDPNotebookStrategy"),
])
def test_lightnings_find_unused_parameters_false_names_are_the_plain_strategies(
        name: str, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from xtrain.core import Trainer

    monkeypatch.setattr("sys.argv", [__file__])  # ddp re-runs a script: under xdist the command is `python -c`
    strategy: Any = Trainer(strategy=name, accelerator="cpu", devices=2, logger=False).strategy
    assert type(strategy).__name__ == expected and strategy.find_unused_parameters is False
