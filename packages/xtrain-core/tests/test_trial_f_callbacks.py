"""Callback defects found by trial F (xtrain against Lightning 2.6.6), one test per defect.

Every expected number was measured with Lightning 2.6.6 running the same scenario (same seeds, data and
settings) on the CPU with one thread; the scenarios mirror the trial's scripts in a smaller form.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.optim.swa_utils import get_ema_multi_avg_fn
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import Trainer, TrainModule
from xtrain.core.callbacks import (
    BackboneFinetuning,
    Callback,
    EMAWeightAveraging,
    ModelCheckpoint,
    StochasticWeightAveraging,
    WeightAveraging,
)
from xtrain.core.errors import ConfigError

QUIET: dict[str, Any] = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False,
                         "enable_model_summary": False}


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _loader(n: int, seed: int = 123) -> DataLoader[Any]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    w = torch.randn(8, 1, generator=g)
    return DataLoader(TensorDataset(x, x @ w + 0.1 * torch.randn(n, 1, generator=g)), batch_size=8, shuffle=False)


def _psum(module: torch.nn.Module) -> float:
    return round(float(sum(p.detach().double().abs().sum() for p in module.parameters())), 5)


class _Net(TrainModule):
    """No ``forward``: many Lightning modules define none, and SWA must still recompute batch norms."""

    def __init__(self, *, bn: bool = False, lr: float = 0.05, momentum: float = 0.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), *([torch.nn.BatchNorm1d(16)] if bn else []),
                                       torch.nn.ReLU(), torch.nn.Linear(16, 1))
        self.lr, self.momentum = lr, momentum

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=self.momentum)


class _Finetune(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
        self.head = torch.nn.Linear(16, 1)
        self.lrs: list[list[float]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.head(self.backbone(x)), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam([p for p in self.parameters() if p.requires_grad], lr=1e-2)

    def on_train_epoch_start(self) -> None:
        self.lrs.append([round(g["lr"], 8) for g in self.trainer.optimizers[0].param_groups])


def _epoch_files(directory: Path) -> list[str]:
    return sorted(f for f in os.listdir(directory) if f.startswith("epoch"))


def test_d4_backbone_finetuning_default_doubles_the_backbone_lr() -> None:
    module = _Finetune()
    Trainer(max_epochs=5, callbacks=[BackboneFinetuning(unfreeze_backbone_at_epoch=2)], enable_checkpointing=False,
            **QUIET).fit(module, _loader(40))
    # Lightning 2.6.6: its default lambda_func (`multiplicative`) returns 2.0.
    assert module.lrs == [[0.01], [0.01], [0.01, 0.001], [0.01, 0.002], [0.01, 0.004]]


def test_d3_weight_averaging_passes_the_zero_based_step_index() -> None:
    seen: list[tuple[int | None, int | None]] = []

    class EMAFrom3(WeightAveraging):  # the subclass from Lightning's WeightAveraging docs
        def __init__(self) -> None:
            super().__init__(multi_avg_fn=get_ema_multi_avg_fn(0.8))

        def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
            seen.append((step_idx, epoch_idx))
            return step_idx is not None and step_idx >= 3

    module = _Net()
    Trainer(max_epochs=1, callbacks=[EMAFrom3()], enable_checkpointing=False, **QUIET).fit(module, _loader(48))
    # Measured with Lightning 2.6.6.
    assert seen == [(0, None), (1, None), (2, None), (3, None), (4, None), (5, None), (None, 0)]
    assert _psum(module) == pytest.approx(29.98816, abs=2e-5)


def test_d3_ema_counts_steps_from_zero() -> None:
    module = _Net()
    ema = EMAWeightAveraging(decay=0.8, update_starting_at_step=2, update_every_n_steps=2)
    Trainer(max_epochs=2, callbacks=[ema], enable_checkpointing=False, **QUIET).fit(module, _loader(48))
    assert ema.num_averaged == 5  # step indices 2, 4, 6, 8, 10 of 0..11
    assert _psum(module) == pytest.approx(31.17922, abs=2e-5)  # measured with Lightning 2.6.6


def test_d2_swa_averages_the_weights_at_the_start_of_the_swa_epochs() -> None:
    module = _Net()
    swa = StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=2, annealing_epochs=1)
    Trainer(max_epochs=4, callbacks=[swa], enable_checkpointing=False, **QUIET).fit(module, _loader(24))
    # Lightning 2.6.6: the weights reached at the end of epochs 0, 1 and 2.
    assert swa.num_averaged == 3
    assert _psum(module) == pytest.approx(28.96797, abs=2e-5)


def test_c5_swa_recomputes_batch_norms_through_training_step_without_forward() -> None:
    module = _Net(bn=True)
    Trainer(max_epochs=3, callbacks=[StochasticWeightAveraging(swa_lrs=0.01)], enable_checkpointing=False,
            **QUIET).fit(module, _loader(24))
    bn = module.net[1]
    assert isinstance(bn, torch.nn.BatchNorm1d) and bn.running_mean is not None and bn.running_var is not None
    # Measured with Lightning 2.6.6 (an equal average over the 3 training batches; momentum restored).
    assert float(bn.running_mean.sum()) == pytest.approx(0.1096, abs=2e-5)
    assert float(bn.running_var.sum()) == pytest.approx(6.11582, abs=2e-5)
    assert int(bn.num_batches_tracked) == 3 and bn.momentum == 0.1


def test_d7_monitored_checkpoint_ranks_mid_epoch_validations(tmp_path: Path) -> None:
    mc = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=2)
    Trainer(max_epochs=4, val_check_interval=0.5, callbacks=[mc], num_sanity_val_steps=0, **QUIET).fit(
        _Net(lr=0.03, momentum=0.9), _loader(64), _loader(24, seed=7))
    # Lightning 2.6.6: save_on_train_epoch_end=None becomes False with val_check_interval < 1.
    assert _epoch_files(tmp_path) == ["epoch=3-step=28.ckpt", "epoch=3-step=32.ckpt"]
    assert mc.best_model_score is not None and float(mc.best_model_score) == pytest.approx(6.94122, abs=2e-5)


def test_d9_default_checkpoint_saves_only_after_validations(tmp_path: Path) -> None:
    trainer = Trainer(max_epochs=3, check_val_every_n_epoch=2, num_sanity_val_steps=0, default_root_dir=tmp_path,
                      **QUIET)
    trainer.fit(_Net(), _loader(64), _loader(24, seed=7))
    assert trainer.checkpoint_callback is not None
    assert os.path.basename(trainer.checkpoint_callback.best_model_path) == "epoch=1-step=16.ckpt"  # Lightning 2.6.6


def test_c6_step_saves_before_the_first_validation_wait_for_it(tmp_path: Path) -> None:
    mc = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", every_n_train_steps=2, save_top_k=2)
    Trainer(max_epochs=2, callbacks=[mc], num_sanity_val_steps=0, **QUIET).fit(
        _Net(lr=0.02), _loader(48), _loader(16, seed=7))
    # Lightning 2.6.6 (the step-6 save point comes before epoch 0's validation and is not made up).
    assert _epoch_files(tmp_path) == ["epoch=1-step=10.ckpt", "epoch=1-step=8.ckpt"]
    assert os.path.basename(mc.best_model_path) == "epoch=1-step=8.ckpt"


def test_c6_missing_monitor_after_validation_names_the_logged_keys(tmp_path: Path) -> None:
    mc = ModelCheckpoint(dirpath=tmp_path, monitor="val_acc")
    with pytest.raises(ConfigError, match=r"monitor='val_acc'.*logged: 'val_loss'") as caught:
        Trainer(max_epochs=1, callbacks=[mc], num_sanity_val_steps=0, **QUIET).fit(
            _Net(), _loader(16), _loader(16, seed=7))
    assert "none installed" not in str(caught.value)


class _Counter(Callback):  # the stateful callback from Lightning's docs
    def __init__(self, what: str = "epochs") -> None:
        self.what = what
        self.state = {"epochs": 0}

    @property
    def state_key(self) -> str:
        return self._generate_state_key(what=self.what)

    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule) -> None:
        self.state["epochs"] += 1

    def state_dict(self) -> dict[str, Any]:
        return self.state.copy()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state.update(state)


def test_c4_generate_state_key_as_lightning(tmp_path: Path) -> None:
    assert _Counter().state_key == "_Counter{'what': 'epochs'}"  # Lightning's format: qualname + repr(kwargs)
    trainer = Trainer(max_epochs=2, callbacks=[_Counter()], default_root_dir=tmp_path, **QUIET)
    trainer.fit(_Net(), _loader(16))
    assert trainer.checkpoint_callback is not None
    last = trainer.checkpoint_callback.last_model_path
    saved = torch.load(last, map_location="cpu", weights_only=False)["callbacks"]
    assert saved["_Counter{'what': 'epochs'}"] == {"epochs": 2}
    resumed, other = _Counter(), _Counter("batches")
    Trainer(max_epochs=3, callbacks=[resumed, other], default_root_dir=tmp_path, **QUIET).fit(
        _Net(), _loader(16), ckpt_path=last)
    assert resumed.state == {"epochs": 3} and other.state == {"epochs": 1}


def test_best_k_models_stays_empty_without_monitor(tmp_path: Path) -> None:
    mc = ModelCheckpoint(dirpath=tmp_path, every_n_epochs=2, save_top_k=1)
    Trainer(max_epochs=4, callbacks=[mc], **QUIET).fit(_Net(), _loader(16))
    # Lightning 2.6.6: no ranking without a monitor; the newest file is best_model_path and the older one is gone.
    assert mc.best_k_models == {}
    assert _epoch_files(tmp_path) == ["epoch=3-step=8.ckpt"]
    assert os.path.basename(mc.best_model_path) == "epoch=3-step=8.ckpt"
