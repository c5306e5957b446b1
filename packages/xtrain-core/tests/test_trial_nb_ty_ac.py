"""Notebooks, users' type checkers and loop-control numerics beside Lightning 2.6.6 (outside trials NB, TY and AC):
what a Lightning user's code reads from the Trainer after the fixes they led to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from xtrain.core import Callback, Trainer, TrainModule
from xtrain.core.callbacks import ModelCheckpoint
from xtrain.core.testing import TinyClassifier, tiny_loaders

QUIET: dict[str, Any] = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False}


class Validations(Callback):
    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def on_sanity_check_start(self, trainer: Trainer, module: TrainModule) -> None:
        self.seen.append(("sanity", trainer.global_step))

    def on_validation_start(self, trainer: Trainer, module: TrainModule) -> None:
        if not trainer.sanity_checking:
            self.seen.append(("val", trainer.global_step))


def test_a_resumed_fit_runs_no_sanity_check_and_a_fresh_one_does(tmp_path: Path) -> None:
    """As Lightning: the run being resumed checked its validation already; the sanity check of a resumed fit ran
    the callbacks' validation hooks once more (checked against 2.6.6 from checkpoints mid-epoch and at an end)."""
    train, val = tiny_loaders()
    saving = ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=5, save_top_k=-1, filename="s{step}")
    Trainer(max_epochs=1, default_root_dir=tmp_path, callbacks=[saving], logger=False,
            **QUIET).fit(TinyClassifier(), train, val)
    for step in (5, 15):  # mid-epoch, and the epoch's last batch
        seen = Validations()
        Trainer(max_epochs=2, default_root_dir=tmp_path, callbacks=[seen], logger=False, **QUIET).fit(
            TinyClassifier(), train, val, ckpt_path=tmp_path / "ck" / f"sstep={step}.ckpt")
        assert seen.seen and all(kind == "val" for kind, _ in seen.seen), (step, seen.seen)
    seen = Validations()
    fresh = Trainer(max_epochs=1, default_root_dir=tmp_path / "fresh", callbacks=[seen], logger=False, **QUIET)
    fresh.fit(TinyClassifier(), train, val)
    assert seen.seen[0] == ("sanity", 0)


def test_logged_metrics_are_tensors_and_numpy_numbers_can_be_logged(tmp_path: Path) -> None:
    """Lightning's ``trainer.logged_metrics`` holds tensors (``.item()`` raised on xtrain's floats); a NumPy number
    is logged as Lightning logs any number (it was refused as "not a scalar or Metric")."""

    class NumpyLogged(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss: torch.Tensor = super().training_step(batch, batch_idx)
            self.log("lr_np", np.float32(0.5))
            return loss

    train, _ = tiny_loaders()
    trainer = Trainer(max_steps=2, default_root_dir=tmp_path, log_every_n_steps=1, **QUIET)
    trainer.fit(NumpyLogged(), train)
    logged = trainer.logged_metrics
    assert isinstance(logged["train_loss"], torch.Tensor) and logged["train_loss"].ndim == 0
    assert logged["lr_np"].item() == 0.5 and float(trainer.callback_metrics["lr_np"]) == 0.5
