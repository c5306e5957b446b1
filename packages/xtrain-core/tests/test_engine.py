from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from xtrain.core import CheckpointError, ConfigError, Engine, Trainer, seed_everything
from xtrain.core.testing import TinyClassifier, tiny_dataset


def plain_engine_loop(engine: Engine, steps: int) -> torch.nn.Module:
    seed_everything(3)
    model = TinyClassifier(dropout=0.2).net
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = engine.setup(model, optimizer)
    loader = engine.setup_dataloaders(DataLoader(tiny_dataset(128), batch_size=16, shuffle=True))
    done = 0
    while done < steps:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            engine.backward(loss)
            optimizer.step()
            done += 1
            if done == steps:
                break
    return model.module


def test_engine_loop_equals_the_trainer() -> None:
    """One path to the hardware: the same model on the Engine and on the Trainer ends with equal weights."""
    engine_model = plain_engine_loop(Engine(accelerator="cpu", devices=1), steps=12)

    class Module(TinyClassifier):
        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    seed_everything(3)
    module = Module(dropout=0.2)
    Trainer(accelerator="cpu", devices=1, max_steps=12, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False).fit(
        module, DataLoader(tiny_dataset(128), batch_size=16, shuffle=True))
    for a, b in zip(engine_model.state_dict().values(), module.net.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_engine_save_load_round_trip(tmp_path: Path) -> None:
    engine = Engine(accelerator="cpu", devices=1)
    model = plain_engine_loop(engine, steps=3)
    wrapped = engine.setup(model)
    optimizer = torch.optim.Adam(wrapped.parameters())
    optimizer = engine.setup_optimizers(optimizer)
    loss = wrapped(torch.randn(4, 16)).sum()
    engine.backward(loss)
    optimizer.step()
    engine.save(tmp_path / "e.ckpt", {"model": wrapped, "optimizer": optimizer, "step": 3})
    ckpt = torch.load(tmp_path / "e.ckpt", weights_only=True)
    assert ckpt["xtrain"]["written_by"] == "Engine" and ckpt["step"] == 3
    assert "net.0.weight" not in ckpt["model"] and "0.weight" in ckpt["model"]
    assert set(ckpt["optimizer"]["state"]) == {"0.weight", "0.bias", "3.weight", "3.bias"}
    with torch.no_grad():
        for p in wrapped.parameters():
            p.zero_()
    rest = engine.load(tmp_path / "e.ckpt", {"model": wrapped, "optimizer": optimizer})
    assert rest == {"step": 3}
    assert torch.equal(wrapped.module.state_dict()["0.weight"], ckpt["model"]["0.weight"])


def test_engine_helpers() -> None:
    engine = Engine(accelerator="cpu", devices=1)
    engine.launch()
    assert engine.world_size == 1 and engine.is_global_zero and engine.device.type == "cpu"
    t = torch.tensor([1.0, 2.0])
    assert torch.equal(engine.all_reduce(t), t) and engine.all_gather(t).shape == (1, 2)
    assert engine.all_gather(2.5).tolist() == [2.5] and engine.all_reduce(3.0).item() == 3.0  # numbers, as Fabric
    assert engine.broadcast({"a": 1}) == {"a": 1}
    model = engine.setup(torch.nn.Linear(2, 1))
    with engine.no_backward_sync(model):
        engine.backward(model(torch.ones(1, 2)).sum())
    assert engine.launch(lambda e, x: x * 2, 21) == 42
    with pytest.raises(ConfigError, match="exactly one of max_norm and clip_val"):
        engine.clip_gradients(model, torch.optim.SGD(model.parameters(), lr=1), max_norm=1.0, clip_val=1.0)
    norm = engine.clip_gradients(model, torch.optim.SGD(model.parameters(), lr=1), max_norm=1e-3)
    assert norm is not None and max(float(p.grad.norm()) for p in model.parameters()) <= 1e-3 + 1e-6


def test_engine_arguments_share_the_trainers_errors() -> None:
    for kwargs in ({"accelerator": "nope"}, {"devices": 0}, {"precision": "12"}, {"strategy": "nope"}):
        with pytest.raises(ConfigError) as engine_error:
            Engine(**kwargs)
        with pytest.raises(ConfigError) as trainer_error:
            Trainer(**kwargs)
        assert str(engine_error.value) == str(trainer_error.value)


def _engine_with_scheduler() -> tuple[Engine, Any, Any, Any]:
    engine = Engine(accelerator="cpu", devices=1)
    model = engine.setup(torch.nn.Linear(4, 2))
    optimizer = engine.setup_optimizers(torch.optim.SGD(model.parameters(), lr=1.0))
    return engine, model, optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)


def test_engine_load_restores_a_scheduler_in_place(tmp_path: Path) -> None:
    """A scheduler is loaded through its load_state_dict, as Fabric does, not replaced by the saved dict."""
    engine, model, optimizer, scheduler = _engine_with_scheduler()
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    engine.save(tmp_path / "e.ckpt", {"model": model, "optimizer": optimizer, "scheduler": scheduler})
    saved_lr = scheduler.get_last_lr()
    for _ in range(2):
        scheduler.step()
    state = {"model": model, "optimizer": optimizer, "scheduler": scheduler}
    engine.load(tmp_path / "e.ckpt", state)
    assert state["scheduler"] is scheduler
    assert scheduler.last_epoch == 3 and scheduler.get_last_lr() == saved_lr


def test_engine_load_refused_state_loads_nothing(tmp_path: Path) -> None:
    engine, model, _, scheduler = _engine_with_scheduler()
    engine.save(tmp_path / "e.ckpt", {"model": model, "scheduler": scheduler})
    checkpoint = torch.load(tmp_path / "e.ckpt", weights_only=True)
    del checkpoint["scheduler"]["last_epoch"]
    torch.save(checkpoint, tmp_path / "bad.ckpt")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    edited = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(Exception, match="scheduler: missing last_epoch") as refused:
        engine.load(tmp_path / "bad.ckpt", {"model": model, "scheduler": scheduler})
    assert type(refused.value).__name__ == "CheckpointError"
    assert all(torch.equal(v, edited[k]) for k, v in model.state_dict().items())
    assert not all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize(("edit", "expected"), [
    ({"base_lrs": [1.0, 1.0]}, r"scheduler.base_lrs: 2 values, one per parameter group of an optimizer with 1"),
    ({"optimizer": {}}, "scheduler: optimizer would replace the scheduler's own attributes"),
], ids=["rates-for-two-groups", "shadows-its-optimizer"])
def test_engine_load_checks_a_scheduler_as_fit_does(edit: dict[str, Any], expected: str, tmp_path: Path) -> None:
    engine, model, _, scheduler = _engine_with_scheduler()
    engine.save(tmp_path / "e.ckpt", {"model": model, "scheduler": scheduler})
    checkpoint = torch.load(tmp_path / "e.ckpt", weights_only=True)
    checkpoint["scheduler"].update(edit)
    torch.save(checkpoint, tmp_path / "bad.ckpt")
    with pytest.raises(CheckpointError, match=expected):
        engine.load(tmp_path / "bad.ckpt", {"model": model, "scheduler": scheduler})
    assert scheduler.base_lrs == [1.0] and scheduler.optimizer is not None


class _Counter:
    def __init__(self) -> None:
        self.seen = 0

    def state_dict(self) -> dict[str, int]:
        return {"seen": self.seen}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state["seen"] < 0:
            raise ValueError("seen must not be negative")
        self.seen = state["seen"]


def test_engine_load_undoes_loaded_states_when_one_refuses(tmp_path: Path) -> None:
    """A state the plan cannot judge (user code refuses it) undoes the states loaded before it."""
    engine, _, optimizer, scheduler = _engine_with_scheduler()
    counter = _Counter()
    engine.save(tmp_path / "e.ckpt", {"scheduler": scheduler, "counter": counter})
    checkpoint = torch.load(tmp_path / "e.ckpt", weights_only=True)
    checkpoint["counter"]["seen"] = -1
    torch.save(checkpoint, tmp_path / "bad.ckpt")
    optimizer.step()
    scheduler.step()
    with pytest.raises(Exception, match=r"counter refused its saved state \(ValueError: seen must not be negative"):
        engine.load(tmp_path / "bad.ckpt", {"scheduler": scheduler, "counter": counter})
    assert scheduler.last_epoch == 1 and counter.seen == 0
    checkpoint["counter"]["seen"] = 7
    torch.save(checkpoint, tmp_path / "good.ckpt")
    engine.load(tmp_path / "good.ckpt", {"scheduler": scheduler, "counter": counter})
    assert scheduler.last_epoch == 0 and counter.seen == 7


@pytest.mark.parametrize("seed", [1, 42])
def test_distributed_shuffle_follows_the_seed_as_a_distributed_sampler_does(seed: int,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a distributed strategy a shuffled loader is ordered by seed_everything's seed (as Lightning's and
    Fabric's DistributedSampler(seed=PL_GLOBAL_SEED)); it was always seed 0, so every seeded run saw one order."""
    from torch.utils.data.distributed import DistributedSampler

    from xtrain.core._internal.data import prepare_dataloader

    monkeypatch.delenv("XTRAIN_SEED", raising=False)
    seed_everything(seed)
    data = list(range(24))
    for rank in (0, 1):
        loader = prepare_dataloader(DataLoader(data, batch_size=3, shuffle=True),
                                    distributed={"num_replicas": 2, "rank": rank}, use_distributed_sampler=True,
                                    training=True)
        reference = DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=seed)  # type: ignore[arg-type]
        assert [int(i) for batch in loader for i in batch] == list(reference)


def test_engine_save_of_a_plain_state_dict_writes_that_dict(tmp_path: Path) -> None:
    """engine.save(path, model.state_dict()) as in Fabric's examples: the file holds the state dict alone, so plain
    load_state_dict(torch.load(path)) reads it; a state naming modules or optimizers keeps the manifest."""
    engine = Engine(accelerator="cpu", devices=1)
    model = engine.setup(torch.nn.Linear(4, 2))
    engine.save(tmp_path / "flat.pt", model.state_dict())
    fresh = torch.nn.Linear(4, 2)
    fresh.load_state_dict(torch.load(tmp_path / "flat.pt", weights_only=True))
    assert torch.equal(fresh.weight, model.module.weight)
    assert engine.load(tmp_path / "flat.pt").keys() == {"weight", "bias"}
    engine.save(tmp_path / "objects.ckpt", {"model": model})
    assert torch.load(tmp_path / "objects.ckpt", weights_only=True)["xtrain"]["written_by"] == "Engine"


def test_engine_load_with_strict_false_does_not_advise_strict_false(tmp_path: Path) -> None:
    engine = Engine(accelerator="cpu", devices=1)
    engine.save(tmp_path / "e.ckpt", {"model": engine.setup(torch.nn.Linear(4, 8))})
    with pytest.raises(Exception, match="strict=False skips missing and unexpected keys, not tensors") as refused:
        engine.load(tmp_path / "e.ckpt", {"model": engine.setup(torch.nn.Linear(4, 16))}, strict=False)
    assert "pass strict=False" not in str(refused.value)


def test_a_custom_sampler_is_split_across_ranks() -> None:
    """A SubsetRandomSampler under ddp (k-fold cross-validation): each rank gets its share, as with Lightning's and
    Fabric's wrapper; every rank used to see all of its samples."""
    from torch.utils.data import SubsetRandomSampler

    from xtrain.core._internal.data import prepare_dataloader

    subset = list(range(3, 40, 2))  # 19 indices: padded to 20, as DistributedSampler pads
    seen: list[list[int]] = []
    for rank in (0, 1):
        torch.manual_seed(7)
        loader = prepare_dataloader(DataLoader(list(range(40)), batch_size=4, sampler=SubsetRandomSampler(subset)),
                                    distributed={"num_replicas": 2, "rank": rank}, use_distributed_sampler=True,
                                    training=True)
        assert len(loader.sampler) == 10 and len(loader) == 3
        seen.append([int(i) for batch in loader for i in batch])
    torch.manual_seed(7)  # the same draws as one process: the iterator's base seed, then the sampler's permutation
    order = [int(i) for batch in DataLoader(list(range(40)), batch_size=4, sampler=SubsetRandomSampler(subset))
             for i in batch]
    padded = order + order[:1]
    assert seen == [padded[0::2], padded[1::2]]
    assert sorted(set(seen[0]) | set(seen[1])) == sorted(subset)


def test_a_custom_sampler_without_a_length_is_used_as_is_with_a_warning() -> None:
    from collections.abc import Iterator

    from xtrain.core._internal.data import prepare_dataloader

    class Endless(torch.utils.data.Sampler[int]):
        def __iter__(self) -> Iterator[int]:
            return iter(range(8))

    loader = DataLoader(list(range(8)), batch_size=4, sampler=Endless())
    with pytest.warns(UserWarning, match="has no length, so it is used as is"):
        prepared = prepare_dataloader(loader, distributed={"num_replicas": 2, "rank": 0},
                                      use_distributed_sampler=True, training=True)
    assert prepared is loader
