"""Trial F's stage defects: several training loaders (D5), a second fit (D6), the resume order (C3), the datamodule
state in test (H8), the setup order (H5) and configure_model at every stage (H6).

Expected values were measured with Lightning 2.6.6 running the same code (``lightning.pytorch`` in place of
``xtrain.core``), on the CPU with ``OMP_NUM_THREADS=1``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import Callback, ConfigError, DataModule, ModelCheckpoint, Trainer, TrainModule
from xtrain.core.combined_loader import CombinedLoader

QUIET: dict[str, Any] = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
                         "enable_model_summary": False}


# -- D5: a list or dict of training loaders ---------------------------------------------------------------------
def _pair() -> tuple[DataLoader[Any], DataLoader[Any]]:
    a = DataLoader(TensorDataset(torch.arange(10.0).unsqueeze(1)), batch_size=2)
    b = DataLoader(TensorDataset(100 + torch.arange(6.0).unsqueeze(1)), batch_size=2)
    return a, b


def _ids(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _ids(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        if len(x) == 1 and isinstance(x[0], torch.Tensor):
            return x[0].flatten().tolist()
        return [_ids(v) for v in x]
    return None if x is None else x.flatten().tolist()


class Seen(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.l = torch.nn.Linear(1, 1)
        self.seen: list[Any] = []
        self.est: float = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append(_ids(batch))
        xs = [batch[k][0] for k in batch] if isinstance(batch, dict) else [b[0] for b in batch if b is not None]
        return sum(self.l(x / 100).pow(2).mean() for x in xs)  # type: ignore[return-value]

    def configure_optimizers(self) -> Any:
        self.est = self.trainer.estimated_stepping_batches
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit_seen(data: Any, **kwargs: Any) -> tuple[Seen, Trainer]:
    torch.manual_seed(0)
    module = Seen()
    trainer = Trainer(max_epochs=2, **QUIET, **kwargs)
    trainer.fit(module, data)
    return module, trainer


def _psum(module: torch.nn.Module) -> float:
    return sum(p.sum().item() for p in module.parameters())


_A = [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0], [8.0, 9.0]]
_B_CYCLED = [[100.0, 101.0], [102.0, 103.0], [104.0, 105.0], [100.0, 101.0], [102.0, 103.0]]


def test_a_list_of_training_loaders_is_combined_max_size_cycle() -> None:
    a, b = _pair()
    module, trainer = _fit_seen([a, b])
    assert module.seen == [[x, y] for x, y in zip(_A, _B_CYCLED, strict=True)] * 2
    assert (trainer.global_step, module.est, trainer.num_training_batches) == (10, 10, 5)
    assert _psum(module) == pytest.approx(-0.040459, abs=1e-6)
    assert trainer.train_dataloader == [a, b]


def test_a_dict_of_training_loaders_gives_a_dict_batch() -> None:
    a, b = _pair()
    module, trainer = _fit_seen({"a": a, "b": b})
    assert module.seen == [{"a": x, "b": y} for x, y in zip(_A, _B_CYCLED, strict=True)] * 2
    assert trainer.global_step == 10
    assert _psum(module) == pytest.approx(-0.040459, abs=1e-6)


@pytest.mark.parametrize("limit", [0.5, 2])
def test_limit_train_batches_limits_each_loader_then_combines(limit: float) -> None:
    module, trainer = _fit_seen(list(_pair()), limit_train_batches=limit)
    assert (trainer.global_step, module.est, trainer.num_training_batches) == (4, 4, 2)
    assert _psum(module) == pytest.approx(-0.035239, abs=1e-6)


def test_accumulation_over_combined_batches() -> None:
    a, b = _pair()
    module, trainer = _fit_seen({"a": a, "b": b}, accumulate_grad_batches=2)
    assert (trainer.global_step, module.est) == (6, 6)
    assert _psum(module) == pytest.approx(-0.044805, abs=1e-6)


def test_combined_loader_modes() -> None:
    a, b = _pair()
    module, trainer = _fit_seen(CombinedLoader({"a": a, "b": b}, "min_size"))
    assert trainer.global_step == 6 and module.seen[3] == {"a": [0.0, 1.0], "b": [100.0, 101.0]}
    assert _psum(module) == pytest.approx(-0.047114, abs=1e-6)
    module, trainer = _fit_seen(CombinedLoader(list(_pair()), "max_size"))
    assert trainer.global_step == 10 and module.seen[3] == [[6.0, 7.0], None]
    assert _psum(module) == pytest.approx(-0.078379, abs=1e-6)
    with pytest.raises(ValueError, match="sequential"):
        _fit_seen(CombinedLoader(list(_pair()), "sequential"))


def test_combined_loader_iterates_as_lightnings() -> None:
    a, b = _pair()
    combined = CombinedLoader({"a": a, "b": b}, "max_size_cycle")
    batch, batch_idx, dataloader_idx = next(iter(combined))
    assert len(combined) == 5 and (batch_idx, dataloader_idx) == (0, 0)
    assert _ids(batch) == {"a": [0.0, 1.0], "b": [100.0, 101.0]}
    assert [idx for _, _, idx in CombinedLoader([a, b], "sequential")] == [0] * 5 + [1] * 3
    assert len(CombinedLoader([a, b])) == 3  # Lightning's default mode is min_size
    with pytest.raises(ConfigError, match="max_size_cycle"):
        CombinedLoader([a, b], "longest")  # type: ignore[arg-type]


def test_combined_loaders_resume_mid_epoch_exactly(tmp_path: Path) -> None:
    def run(ckpt: str | None, max_steps: int, save: bool = False) -> Seen:
        torch.manual_seed(0)
        module = Seen()
        callbacks = [ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1)] if save else []
        trainer = Trainer(max_epochs=2, max_steps=max_steps, callbacks=callbacks, logger=False,
                          enable_checkpointing=save, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(module, {"a": _pair()[0], "b": _pair()[1]}, ckpt_path=ckpt)
        return module

    whole = run(None, -1)
    run(None, 3, save=True)
    (ckpt,) = tmp_path.glob("*step=3*.ckpt")
    with pytest.warns(UserWarning, match="discarding 3 batches"):
        resumed = run(str(ckpt), -1)
    assert resumed.seen == whole.seen[3:]
    assert _psum(resumed) == _psum(whole)


# -- D6: a second fit calls configure_optimizers again ------------------------------------------------------------
LOG: list[str] = []


def _data() -> DataLoader[Any]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(24, 3, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)


class Sized(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(3, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def test_step(self, batch: Any, batch_idx: int) -> None:
        pass

    def configure_optimizers(self) -> Any:
        LOG.append("configure_optimizers")
        opt = torch.optim.Adam(self.parameters(), lr=0.05)
        steps = int(self.trainer.estimated_stepping_batches)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=steps)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def setup(self, stage: str) -> None:
        LOG.append(f"M.setup:{stage}")

    def configure_model(self) -> None:
        LOG.append("M.configure_model")


class SetupLog(Callback):
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        LOG.append(f"CB.setup:{stage}")


def test_second_fit_configures_fresh_optimizers_and_hooks_run_in_lightnings_order() -> None:
    LOG.clear()
    torch.manual_seed(0)
    module = Sized()
    trainer = Trainer(max_epochs=1, callbacks=[SetupLog()], **QUIET)
    trainer.fit(module, _data())
    assert _psum(module) == pytest.approx(-0.158504, abs=1e-6)
    trainer.fit_loop.max_epochs = 2
    trainer.fit(module, _data())  # OneCycleLR sized for 12 steps: a reused one raised "Tried to step 13 times"
    assert trainer.global_step == 12
    assert _psum(module) == pytest.approx(0.540174, abs=1e-6)
    # H5: callbacks' setup before the module's; H6: configure_model at every stage.
    assert LOG == ["CB.setup:fit", "M.setup:fit", "M.configure_model", "configure_optimizers"] * 2
    LOG.clear()
    trainer.test(module, _data(), verbose=False)
    assert LOG == ["CB.setup:test", "M.setup:test", "M.configure_model"]


# -- C3: on_load_checkpoint runs before configure_optimizers -------------------------------------------------------
class Head(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(3, 1)
        self.extra: torch.nn.Module | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.net(x)
        return y + self.extra(x) if self.extra is not None else y

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self(batch[0]), batch[1])

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.05)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["has_extra"] = self.extra is not None

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if checkpoint["has_extra"] and self.extra is None:
            self.extra = torch.nn.Linear(3, 1)


def _head_checkpoint(tmp_path: Path) -> None:
    """``tmp_path/h.ckpt``: one epoch of a Head that has its extra layer."""
    torch.manual_seed(0)
    head = Head()
    head.extra = torch.nn.Linear(3, 1)
    trainer = Trainer(max_epochs=1, **QUIET)
    trainer.fit(head, _data())
    trainer.save_checkpoint(tmp_path / "h.ckpt")


def test_a_head_rebuilt_in_on_load_checkpoint_is_optimized_and_restored(tmp_path: Path) -> None:
    _head_checkpoint(tmp_path)
    torch.manual_seed(5)
    resumed = Head()
    trainer = Trainer(max_epochs=2, **QUIET)
    trainer.fit(resumed, _data(), ckpt_path=tmp_path / "h.ckpt")
    assert sum(len(g["params"]) for g in trainer.optimizers[0].param_groups) == 4
    assert _psum(resumed) == pytest.approx(2.056482, abs=1e-6)


def test_a_refused_resume_still_loads_nothing(tmp_path: Path) -> None:
    _head_checkpoint(tmp_path)

    class Wider(Head):
        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            self.extra = torch.nn.Linear(3, 2)  # does not fit the saved head

    wider = Wider()
    before = {k: v.clone() for k, v in wider.state_dict().items() if k.startswith("net.")}
    from xtrain.core import CheckpointError

    with pytest.raises(CheckpointError, match="extra"):
        Trainer(max_epochs=2, **QUIET).fit(wider, _data(), ckpt_path=tmp_path / "h.ckpt")
    assert all(torch.equal(wider.state_dict()[k], v) for k, v in before.items())


# -- H8: test(ckpt_path=...) restores the datamodule's state --------------------------------------------------------
class StatefulData(DataModule):
    def __init__(self) -> None:
        super().__init__()
        self.loaded: dict[str, Any] | None = None

    def train_dataloader(self) -> DataLoader[Any]:
        return _data()

    def test_dataloader(self) -> DataLoader[Any]:
        return _data()

    def state_dict(self) -> dict[str, Any]:
        return {"counter": 7}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.loaded = state_dict


def test_test_with_ckpt_path_loads_the_datamodule_state(tmp_path: Path) -> None:
    trainer = Trainer(max_epochs=1, **QUIET)
    trainer.fit(Sized(), datamodule=StatefulData())
    trainer.save_checkpoint(tmp_path / "dm.ckpt")
    data = StatefulData()
    Trainer(**QUIET).test(Sized(), datamodule=data, ckpt_path=tmp_path / "dm.ckpt", verbose=False)
    assert data.loaded == {"counter": 7}
