"""A validation inside a gradient accumulation window cannot be ranked by ModelCheckpoint (saves happen after
optimizer steps, where a resume is exact): the run says so once, with an interval that works (outside trial X found
every mid-window validation silently left out of the top-k)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from xtrain.core import Trainer
from xtrain.core.callbacks import ModelCheckpoint
from xtrain.core.testing.models import TinyClassifier, tiny_dataset

_TOLD = "inside a gradient accumulation window"


def _fit(root: Path, *, interval: Any, monitor: str | None) -> list[str]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        Trainer(max_epochs=2, accumulate_grad_batches=3, val_check_interval=interval, logger=False,
                enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                callbacks=[ModelCheckpoint(dirpath=root, monitor=monitor)]).fit(
            TinyClassifier(), DataLoader(tiny_dataset(160), batch_size=8), DataLoader(tiny_dataset(16), batch_size=8))
    return [str(w.message) for w in seen if _TOLD in str(w.message)]


def test_a_ranking_checkpoint_says_once_which_interval_works(tmp_path: Path) -> None:
    told = _fit(tmp_path, interval=0.5, monitor="val_loss")  # 20 batches: validations after batches 10 and 20
    assert len(told) == 1, told
    assert "after batch 10 of epoch 0" in told[0] and "'val_loss'" in told[0] and "val_check_interval=9" in told[0]


@pytest.mark.parametrize(("interval", "monitor"), [(9, "val_loss"), (0.5, None)])
def test_no_word_when_every_validation_is_ranked_or_nothing_ranks(tmp_path: Path, interval: Any,
                                                                  monitor: str | None) -> None:
    assert _fit(tmp_path, interval=interval, monitor=monitor) == []
