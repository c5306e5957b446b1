"""A fit resumed from a checkpoint saved after EarlyStopping stopped the run ends where the uninterrupted fit ended
(outside trial X: a kill after the final save, then a restart, trained on 3-7 more steps to other weights)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from xtrain.core import Trainer
from xtrain.core.callbacks import EarlyStopping, ModelCheckpoint
from xtrain.core.testing.models import TinyClassifier, tiny_dataset


class _Flat(TinyClassifier):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("score", torch.tensor(1.0))  # never improves after the first check


def _fit(root: Path, *, max_epochs: int, ckpt_path: str | None = None,
         stopper: EarlyStopping | None = None) -> tuple[Trainer, _Flat]:
    torch.manual_seed(0)
    module = _Flat()
    trainer = Trainer(max_epochs=max_epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      num_sanity_val_steps=0, callbacks=[ModelCheckpoint(dirpath=root, save_last=True),
                                                         stopper or EarlyStopping("score", patience=2)])
    trainer.fit(module, DataLoader(tiny_dataset(64), batch_size=16), DataLoader(tiny_dataset(16), batch_size=16),
                ckpt_path=ckpt_path)
    return trainer, module


def test_a_resumed_stopped_fit_stops_at_once(tmp_path: Path) -> None:
    first, module = _fit(tmp_path, max_epochs=10)
    assert first.current_epoch == 3 and first.global_step == 12  # checks at epochs 0-2: stop after the third
    with pytest.warns(UserWarning, match="stopped the run .*did not improve"):
        again, resumed = _fit(tmp_path, max_epochs=10, ckpt_path="last")
    assert again.global_step == 12
    assert all(torch.equal(a, b) for a, b in zip(module.parameters(), resumed.parameters(), strict=True))


def test_without_the_callback_the_fit_trains_on(tmp_path: Path) -> None:
    _fit(tmp_path, max_epochs=10)
    again, _ = _fit(tmp_path, max_epochs=5, ckpt_path="last", stopper=EarlyStopping("other", strict=False))
    assert again.global_step == 20
