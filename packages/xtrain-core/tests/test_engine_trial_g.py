"""What an outside trial porting Accelerate scripts to the Engine (trial G) found, in one process.

* A set-up dataloader started every new process at epoch 0 and overwrote a user's ``loader.sampler.set_epoch(e)``:
  a resumed run re-read earlier epochs' samples. It now has ``set_epoch``, ``state_dict`` and ``load_state_dict``,
  and in the state of ``engine.save``/``engine.load`` it resumes the saved epoch after the batches already taken.
* ``engine.save`` pickled any object (a dataloader, a sampler), and ``engine.load`` then refused the file.
* ``engine.setup(model, optimizer, loader)`` (the ``accelerator.prepare`` habit) failed with a bare AttributeError
  after the model had been set up.
* Under ``bf16-mixed`` a set-up module returned bfloat16, so the loss computed after it was bfloat16.
* The non-finite-loss advice named Trainer arguments (``gradient_clip_val``) and pointed into xtrain.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import ConfigError, Engine
from xtrain.core._internal.data import prepare_dataloader
from xtrain.core._internal.engine_loader import EngineLoader

IDS = TensorDataset(torch.arange(32))


def _engine() -> Engine:
    engine = Engine(accelerator="cpu", devices=1)
    engine.launch()
    return engine


def _ids(batch: Any) -> list[int]:
    return [int(i) for i in batch[0]]


def _uninterrupted(epochs: int) -> list[list[int]]:
    torch.manual_seed(0)
    loader = _engine().setup_dataloaders(DataLoader(IDS, batch_size=4, shuffle=True))
    return [_ids(batch) for _ in range(epochs) for batch in loader]


@pytest.mark.parametrize("with_rng", [False, True])
def test_a_saved_loader_resumes_its_epoch_after_the_batches_taken(tmp_path: Path, with_rng: bool) -> None:
    expected = _uninterrupted(3)  # 8 batches an epoch
    torch.manual_seed(0)
    engine = _engine()
    loader = engine.setup_dataloaders(DataLoader(IDS, batch_size=4, shuffle=True))
    seen = [_ids(batch) for batch in loader]
    for i, batch in enumerate(loader):
        seen.append(_ids(batch))
        if i == 2:
            break
    state = {"loader": loader, **({"rng": torch.get_rng_state()} if with_rng else {})}
    engine.save(tmp_path / "mid.ckpt", state)

    torch.manual_seed(123)  # a new process: another global generator state
    fresh = _engine().setup_dataloaders(DataLoader(IDS, batch_size=4, shuffle=True))
    restored = Engine(accelerator="cpu", devices=1).load(tmp_path / "mid.ckpt", {"loader": fresh})
    if with_rng:
        torch.set_rng_state(restored["rng"])
    seen += [_ids(batch) for batch in fresh]
    assert seen == expected[:16], "the rest of epoch 1, in the saved epoch's order"
    later = [_ids(batch) for batch in fresh]
    # Epoch 2's single-process shuffle draws its seed from torch's global generator, as a plain loop does.
    assert (later == expected[16:]) is with_rng


def test_a_user_set_epoch_chooses_the_distributed_order() -> None:
    """Under distributed sampling the order is seed + epoch: ``loader.sampler.set_epoch(e)``, as with a
    DistributedSampler, and the loader's own ``set_epoch`` both choose it (a new process's count starts at 0)."""
    strategy = _engine().strategy

    def loader() -> EngineLoader:
        prepared = prepare_dataloader(DataLoader(IDS, batch_size=4, shuffle=True),
                                      distributed={"num_replicas": 2, "rank": 0}, use_distributed_sampler=True,
                                      training=True)
        return EngineLoader(prepared, strategy, move=False, where=[0, 0], on_pass_end=lambda: None, passes=[])

    reference = loader()
    epochs = [[i for batch in reference for i in _ids(batch)] for _ in range(3)]
    assert epochs[0] != epochs[2]
    by_sampler = loader()
    by_sampler.sampler.set_epoch(2)
    assert [i for batch in by_sampler for i in _ids(batch)] == epochs[2]
    by_loader = loader()
    by_loader.set_epoch(2)
    assert [i for batch in by_loader for i in _ids(batch)] == epochs[2]
    assert [i for batch in by_loader for i in _ids(batch)] != epochs[2], "the next pass is epoch 3"


def test_a_saved_loader_state_is_plain_data_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    engine = _engine()
    loader = engine.setup_dataloaders(DataLoader(IDS, batch_size=4))
    next(iter(loader))
    assert loader.state_dict() == {"epoch": 0, "batches": 1, "epoch_seed": loader.sampler.epoch_seed}
    engine.save(tmp_path / "a.ckpt", {"loader": loader})
    edited = torch.load(tmp_path / "a.ckpt", weights_only=True)
    edited["loader"]["batches"] = -3
    torch.save(edited, tmp_path / "bad.ckpt")
    with pytest.raises(Exception, match=r"loader refused its saved state \(ValueError: batches must be a "):
        engine.load(tmp_path / "bad.ckpt", {"loader": engine.setup_dataloaders(DataLoader(IDS, batch_size=4))})


@pytest.mark.parametrize("what", ["dataloader", "sampler", "nested"])
def test_save_refuses_what_load_could_not_read_back(tmp_path: Path, what: str) -> None:
    engine = _engine()
    loader = engine.setup_dataloaders(DataLoader(IDS, batch_size=4))
    value: Any = {"dataloader": loader.loader, "sampler": loader.sampler,
                  "nested": {"ok": [1, 2.5, "x"], "path": [tmp_path]}}[what]
    with pytest.raises(ConfigError, match="cannot go into the checkpoint") as info:
        engine.save(tmp_path / "x.ckpt", {"step": 3, "thing": value})
    message = str(info.value)
    assert "state['thing']" in message and "weights_only=True" in message and "state_dict()" in message
    if what == "nested":
        assert "state['thing']['path'][0]" in message and "PosixPath" in message
    assert not (tmp_path / "x.ckpt").exists()


def test_setup_with_a_loader_or_scheduler_is_refused_before_anything_is_set_up() -> None:
    engine = _engine()
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for extra, name in ((DataLoader(IDS), "DataLoader"), (torch.optim.lr_scheduler.StepLR(optimizer, 1), "StepLR")):
        with pytest.raises(ConfigError, match=f"optimizers.*{name}.*not a torch.optim.Optimizer") as info:
            engine.setup(model, optimizer, extra)
        assert "engine.setup_dataloaders(loader)" in str(info.value) and "needs no setup" in str(info.value)
    with pytest.raises(ConfigError, match="has no module"):
        engine.strategy.module


@pytest.mark.parametrize(("precision", "expected"), [("bf16-mixed", torch.float32), ("32-true", torch.float32),
                                                     ("bf16-true", torch.float32), ("64-true", torch.float32)])
def test_a_mixed_or_true_precision_returns_float32_outputs(precision: str, expected: torch.dtype) -> None:
    """As Fabric: outputs in the default dtype, whatever the precision computed them in (trial CP)."""
    pytest.importorskip("xtrain.precision")
    engine = Engine(accelerator="cpu", devices=1, precision=precision)
    engine.launch()
    model = engine.setup(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3)))
    logits = model(torch.randn(8, 4))
    assert logits.dtype == expected
    assert torch.nn.functional.cross_entropy(logits, torch.zeros(8, dtype=torch.long)).dtype == expected
    pair = engine.setup(_Pair())(torch.randn(2, 4))
    if precision == "bf16-mixed":
        assert pair["low"].dtype == torch.float32 and pair["double"].dtype == torch.float64  # only bf16 is cast
        assert pair["ids"].dtype == torch.long


class _Pair(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"low": self.layer(x), "double": x.double(), "ids": torch.arange(2)}


def test_the_nonfinite_warning_gives_engine_advice_at_the_users_line() -> None:
    engine = _engine()
    model = engine.setup(torch.nn.Linear(2, 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine.backward(model(torch.ones(1, 2)).sum() * float("nan"))
    (warning,) = [w for w in caught if "non-finite" in str(w.message)]
    assert "engine.clip_gradients(model, optimizer, max_norm=...)" in str(warning.message)
    assert "gradient_clip_val" not in str(warning.message) and "detect_anomaly=True" not in str(warning.message)
    assert warning.filename == __file__


def test_a_compiled_module_is_set_up_compiled_in_place_and_saves_its_own_names(tmp_path: Path) -> None:
    engine = Engine(accelerator="cpu", devices=1)
    engine.launch()
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    model = engine.setup(torch.compile(net))
    assert model.module is net and list(model.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    x = torch.randn(8, 4)
    assert torch.allclose(model(x), net._call_impl(x))
    engine.save(tmp_path / "c.ckpt", {"model": model})
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    plain = engine.setup(fresh)
    engine.load(tmp_path / "c.ckpt", {"model": plain})
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), net.state_dict().values(), strict=True))
