"""A resumed fit logs and monitors what the uninterrupted fit does (outside trial X, a research job resumed at random).

Found: an epoch metric (``on_epoch=True``) resumed mid-epoch was the mean of the batches after the resume only; one
resumed from a checkpoint taken after the epoch's last validation (``val_check_interval=0.5``) was never logged; and
that resume crashed every time with ReduceLROnPlateau ("'val_loss' was never logged"), so the job could never
finish. The checkpoint now carries each rank's epoch aggregates and latest values.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from xtrain.core import Callback, CheckpointError, Trainer
from xtrain.core.callbacks import LearningRateMonitor, ModelCheckpoint
from xtrain.core.loggers import CSVLogger
from xtrain.core.testing.models import TinyClassifier, tiny_dataset


class _Logged(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("loss_mean", loss, on_step=False, on_epoch=True)
        self.log("loss_max", loss, on_step=False, on_epoch=True, reduce_fx="max")
        return loss

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss"}}


class _Crash(Callback):
    """Raises once, at ``hook`` of ``epoch`` (after the checkpoint saved at that point)."""

    def __init__(self, hook: str, epoch: int, batch: int = -1) -> None:
        self.hook, self.epoch, self.batch = hook, epoch, batch

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.hook == "batch" and trainer.current_epoch == self.epoch and batch_idx == self.batch:
            raise RuntimeError("crash")

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        if self.hook == "epoch_end" and trainer.current_epoch == self.epoch:
            raise RuntimeError("crash")


def _fit(root: Path, *, ckpt_path: str | None = None, crash: Callback | None = None) -> Trainer:
    torch.manual_seed(0)
    loaders = (DataLoader(tiny_dataset(96), batch_size=8, shuffle=True), DataLoader(tiny_dataset(32, seed=1), batch_size=8))
    checkpoint = ModelCheckpoint(dirpath=root / "ck", every_n_train_steps=5, save_last=True)
    trainer = Trainer(max_epochs=3, default_root_dir=root, logger=CSVLogger(root, name="logs", version=0),
                      val_check_interval=0.5, callbacks=[checkpoint, LearningRateMonitor(), *([crash] if crash else [])],
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(_Logged(), *loaders, ckpt_path=ckpt_path)
    return trainer


def _rows(root: Path) -> list[dict[str, str]]:
    with (root / "logs" / "version_0" / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("crash", [_Crash("batch", 1, 7), _Crash("epoch_end", 0)], ids=["mid-epoch", "epoch-end"])
def test_a_resumed_fit_logs_what_the_uninterrupted_one_does(tmp_path: Path, crash: _Crash) -> None:
    whole = _fit(tmp_path / "whole")
    with pytest.raises(RuntimeError, match="crash"):
        _fit(tmp_path / "cut", crash=crash)
    resumed = _fit(tmp_path / "cut", ckpt_path="last")  # the epoch-end case crashed with "was never logged"
    assert resumed.global_step == whole.global_step
    for key in ("loss_mean", "loss_max", "val_loss"):
        assert torch.equal(resumed.callback_metrics[key], whole.callback_metrics[key]), key
    assert _rows(tmp_path / "cut") == _rows(tmp_path / "whole")  # every epoch's row, each learning rate, once


def test_a_damaged_logged_entry_is_refused_before_anything_loads(tmp_path: Path) -> None:
    _fit(tmp_path, crash=None)
    last = tmp_path / "ck" / "last.ckpt"
    checkpoint = torch.load(last, weights_only=True)
    checkpoint["logged"][0]["epoch"] = {"loss_mean": {"total": [1.0, "complex64"], "weight": -1.0, "reduce_fx": "median",
                                                      "sync_dist": False, "prog_bar": False, "logger": True,
                                                      "key": "x"}}
    torch.save(checkpoint, tmp_path / "damaged.ckpt")
    module = _Logged()
    before = [p.clone() for p in module.parameters()]
    with pytest.raises(CheckpointError, match=r"logged\[0\]: epoch\['loss_mean'\]"):
        Trainer(max_epochs=4, logger=False, enable_progress_bar=False, enable_model_summary=False,
                default_root_dir=tmp_path / "other").fit(
            module, DataLoader(tiny_dataset(96), batch_size=8), DataLoader(tiny_dataset(32), batch_size=8),
            ckpt_path=tmp_path / "damaged.ckpt")
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))


def test_every_kind_of_logged_value_round_trips_and_files_of_other_shapes_are_refused() -> None:
    from xtrain.core._internal.metric_resume import logged_state_problems
    from xtrain.core._internal.metrics import MetricStore

    store = MetricStore()
    store.log("f", torch.tensor(0.1, dtype=torch.bfloat16), False, True, None, True, "sum", False, 4)
    values = {"a": torch.tensor(0.1), "b": torch.tensor(3), "c": torch.tensor(True), "d": torch.tensor(2.5,
              dtype=torch.float64), "e": torch.tensor(7, dtype=torch.uint8)}
    store.callback_metrics.update(values)
    state = store.checkpoint_state()
    assert logged_state_problems(state) == []
    other = MetricStore()
    other.resume_from(state, mid_epoch=True)
    for key, value in values.items():
        assert other.callback_metrics[key].item() == value.item(), key
    assert other.callback_metrics["a"].dtype == torch.float32 and torch.equal(other.callback_metrics["a"], values["a"])
    assert other.epoch["f"].total.item() == store.epoch["f"].total.item() and other.epoch["f"].reduce_fx == "sum"
    hostile: list[object] = [
        None, [], {"epoch": {}}, {"epoch": {}, "callback_metrics": {}, "x": 1},
        {"epoch": {}, "callback_metrics": {"k": [1.0, "complex64"]}},
        {"epoch": {}, "callback_metrics": {"k": [2**70, "int64"]}},
        {"epoch": {}, "callback_metrics": {"k": ["1", "float32"]}},
        {"epoch": {}, "callback_metrics": {1: [1.0, "float32"]}},
        {"epoch": {"f": {**state["epoch"]["f"], "weight": float("nan")}}, "callback_metrics": {}},
        {"epoch": {"f": {**state["epoch"]["f"], "reduce_fx": "os.system"}}, "callback_metrics": {}},
        {"epoch": {"f": {**state["epoch"]["f"], "total": [1, "int64"]}}, "callback_metrics": {}},
    ]
    for bad in hostile:
        assert logged_state_problems(bad), bad
