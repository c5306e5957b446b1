"""Built-in callbacks beside Lightning 2.6.6's (outside trial CB): what a Lightning user of each one sees."""

from __future__ import annotations

import csv
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import CSVLogger, ModelCheckpoint, Trainer, seed_everything
from xtrain.core.callbacks import LearningRateMonitor, StochasticWeightAveraging
from xtrain.core.testing import TinyClassifier, tiny_loaders

QUIET: dict[str, Any] = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False}


class TwoOptimizers(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        first, second = self.optimizers()
        loss = torch.nn.functional.cross_entropy(self(batch[0]), batch[1])
        first.zero_grad()
        second.zero_grad()
        self.manual_backward(loss)
        first.step()
        second.step()
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        params = list(self.parameters())
        return [torch.optim.SGD(params[:2], lr=0.05), torch.optim.SGD(params[2:], lr=0.02)]


def test_manual_optimization_logs_lrs_and_validation_at_the_batch_count(tmp_path: Path) -> None:
    train, val = tiny_loaders(n=64, batch_size=16)  # 4 batches, 8 optimizer steps per epoch
    monitor = LearningRateMonitor(logging_interval="step")
    trainer = Trainer(max_epochs=2, callbacks=[monitor], logger=CSVLogger(tmp_path, name="", version=0),
                      log_every_n_steps=2, enable_checkpointing=False, **QUIET)
    trainer.fit(TwoOptimizers(), train, val)
    assert trainer.global_step == 16
    assert monitor.lrs == {"lr-SGD": [0.05] * 4, "lr-SGD-1": [0.02] * 4}  # Lightning: every 2 batches
    with (tmp_path / "version_0" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows if r.get("val_loss")] == [3, 7]  # batches, as the training rows
    assert [int(r["step"]) for r in rows if r.get("train_loss")] == [1, 3, 5, 7]


def test_a_time_interval_alone_saves_on_time_only(tmp_path: Path) -> None:
    checkpoint = ModelCheckpoint(dirpath=tmp_path, train_time_interval=timedelta(hours=1))
    assert checkpoint.every_n_epochs == 0  # as Lightning: the epoch schedule is the default of no other
    train, val = tiny_loaders(n=32, batch_size=16)
    Trainer(max_epochs=3, callbacks=[checkpoint], logger=False, **QUIET).fit(TinyClassifier(), train, val)
    assert not list(tmp_path.glob("*.ckpt"))
    assert ModelCheckpoint(train_time_interval=timedelta(hours=1), every_n_epochs=2).every_n_epochs == 2


def test_verbose_names_the_epoch_the_checkpoint_belongs_to(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train, val = tiny_loaders(n=32, batch_size=16)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, verbose=True)
    Trainer(max_epochs=1, callbacks=[checkpoint], logger=False, **QUIET).fit(TinyClassifier(), train, val)
    assert "Epoch 0, global step 2: saved" in capsys.readouterr().out


def test_swa_validates_and_checkpoints_the_training_weights(tmp_path: Path) -> None:
    seed_everything(0)
    train, val = tiny_loaders(n=64, batch_size=16)
    seen: list[torch.Tensor] = []

    class Watched(TinyClassifier):
        def on_validation_start(self) -> None:
            seen.append(torch.cat([p.detach().flatten().clone() for p in self.parameters()]))

        def on_train_epoch_end(self) -> None:
            trained.append(torch.cat([p.detach().flatten().clone() for p in self.parameters()]))

    trained: list[torch.Tensor] = []
    swa = StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=1, annealing_epochs=1)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_top_k=-1)
    Trainer(max_epochs=3, callbacks=[swa, checkpoint], logger=False, num_sanity_val_steps=0,
            **QUIET).fit(Watched(), train, val)
    assert swa.num_averaged == 3 and len(seen) == 3
    assert all(torch.equal(v, t) for v, t in zip(seen, trained, strict=True))  # not the average
    saved = torch.load(tmp_path / "epoch=1-step=8.ckpt", weights_only=True)
    assert "average_state_dict" in saved["weight_averaging"]
    assert torch.equal(torch.cat([v.flatten() for v in saved["state_dict"].values()]), trained[1])


@pytest.mark.parametrize(("argument", "value"), [("min_delta", "0.1"), ("stopping_threshold", "0.5"),
                                                 ("divergence_threshold", "5"), ("min_delta", None)])
def test_early_stopping_refuses_a_threshold_that_is_not_a_number(argument: str, value: Any) -> None:
    from xtrain.core import ConfigError
    from xtrain.core.callbacks import EarlyStopping

    with pytest.raises(ConfigError, match=rf"{argument}=.*must be a number"):
        EarlyStopping("val_loss", **{argument: value})


def test_save_last_takes_lightnings_link_and_refuses_other_values(tmp_path: Path) -> None:
    from xtrain.core import ConfigError

    for wrong in ("yes", 1, "symlink"):
        with pytest.raises(ConfigError, match=r"save_last=.*is not a save_last setting.*'link'"):
            ModelCheckpoint(save_last=wrong)  # type: ignore[arg-type]
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last="link")
    train, val = tiny_loaders(n=32, batch_size=16)
    Trainer(max_epochs=2, callbacks=[checkpoint], logger=False, **QUIET).fit(TinyClassifier(), train, val)
    last, newest = tmp_path / "last.ckpt", tmp_path / "epoch=1-step=4.ckpt"
    assert last.read_bytes() == newest.read_bytes() and last.stat().st_ino == newest.stat().st_ino


def test_early_stopping_takes_numpy_and_tensor_numbers_as_lightning() -> None:
    import numpy as np

    from xtrain.core.callbacks import EarlyStopping

    for value in (np.float32(0.1), torch.tensor(0.1), 1, True):
        assert EarlyStopping("val_loss", min_delta=value, stopping_threshold=value).stopping_threshold is value


def test_the_time_interval_counts_from_the_start_of_training(tmp_path: Path) -> None:
    import time

    checkpoint = ModelCheckpoint(dirpath=tmp_path, train_time_interval=timedelta(seconds=0.5))
    time.sleep(0.6)  # setup between building the callback and fit must not make the first step's save due
    train, _ = tiny_loaders(n=32, batch_size=16)
    Trainer(max_steps=1, callbacks=[checkpoint], logger=False, **QUIET).fit(TinyClassifier(), train)
    assert not list(tmp_path.glob("*.ckpt"))


def test_device_stats_monitor_takes_lightnings_cpu_stats_and_follows_the_batch_count(tmp_path: Path) -> None:
    from xtrain.core.callbacks import DeviceStatsMonitor

    monitor = DeviceStatsMonitor(True)  # Lightning's positional cpu_stats: on the CPU the device's are the CPU's
    train, _ = tiny_loaders(n=64, batch_size=16)
    logger = CSVLogger(tmp_path, name="", version=0)
    Trainer(max_epochs=1, callbacks=[monitor], logger=logger, log_every_n_steps=2, enable_checkpointing=False,
            **QUIET).fit(TwoOptimizers(), train)
    with (tmp_path / "version_0" / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("device_stats/on_train_batch_end/cpu_max_rss_mb")]
    assert [int(r["step"]) for r in rows] == [1, 3]  # every 2 batches though each batch takes 2 optimizer steps
    assert DeviceStatsMonitor(cpu_stats=False).cpu_stats is False
