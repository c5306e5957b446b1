"""``ModelCheckpoint(max_overhead=...)`` keeps saving to a fraction of the run: short epochs do not pay a save each,
and the run still ends with its final state saved. The default checkpoint saves every epoch, as Lightning's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import Callback, ModelCheckpoint, Trainer, TrainModule
from xtrain.core.errors import ConfigError
from xtrain.core.testing import TinyClassifier, tiny_loaders


class SaveCounter(Callback):
    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_save_checkpoint(self, trainer: Trainer, module: TrainModule, checkpoint: dict[str, Any]) -> None:
        self.steps.append(trainer.global_step)


def _fit(tmp_path: Path, epochs: int, *callbacks: Callback) -> Trainer:
    trainer = Trainer(accelerator="cpu", devices=1, max_epochs=epochs, default_root_dir=tmp_path, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, callbacks=list(callbacks))
    train, _ = tiny_loaders(n=32, batch_size=16)
    trainer.fit(TinyClassifier(), train)
    return trainer


def _step_of(path: str | Path) -> int:
    return int(torch.load(path, weights_only=True)["global_step"])


def test_max_overhead_skips_save_points_of_tiny_epochs_and_saves_the_end(tmp_path: Path) -> None:
    counter = SaveCounter()
    callback = ModelCheckpoint(save_last=True, max_overhead=0.01)
    _fit(tmp_path, 40, counter, callback)
    # 40 epochs of 2 steps take a few ms each, a save about as long: most save points are skipped.
    assert counter.steps[0] == 2 and len(counter.steps) < 20, counter.steps
    assert counter.steps[-1] == 80
    files = sorted(p.name for p in (tmp_path / "checkpoints").glob("*.ckpt"))
    assert files == ["epoch=39-step=80.ckpt", "last.ckpt"]
    assert callback.best_model_path.endswith("epoch=39-step=80.ckpt")
    assert _step_of(tmp_path / "checkpoints" / "last.ckpt") == 80


def test_the_default_checkpoint_saves_every_epoch_as_lightning(tmp_path: Path) -> None:
    counter = SaveCounter()
    trainer = _fit(tmp_path, 6, counter)
    assert isinstance(trainer.checkpoint_callback, ModelCheckpoint)
    assert trainer.checkpoint_callback.max_overhead is None
    assert counter.steps == [2, 4, 6, 8, 10, 12]


def test_max_overhead_none_saves_at_every_save_point(tmp_path: Path) -> None:
    counter = SaveCounter()
    _fit(tmp_path, 6, counter, ModelCheckpoint(save_last=True))
    assert counter.steps == [2, 4, 6, 8, 10, 12]


def test_a_skipped_save_point_is_made_up_at_the_end_with_its_epoch(tmp_path: Path) -> None:
    counter = SaveCounter()
    # A fraction this small makes every wait the cap (60 s): only the first save point and the end save.
    callback = ModelCheckpoint(save_top_k=-1, max_overhead=1e-9)
    _fit(tmp_path, 5, counter, callback)
    assert counter.steps == [2, 10]
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("*.ckpt")) == [
        "epoch=0-step=2.ckpt", "epoch=4-step=10.ckpt"]


def test_the_wait_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ModelCheckpoint, "MAX_OVERHEAD_WAIT", 0.0)
    counter = SaveCounter()
    _fit(tmp_path, 4, counter, ModelCheckpoint(max_overhead=1e-9))
    assert counter.steps == [2, 4, 6, 8]


def test_a_resumed_run_saves_its_end_after_skipped_points(tmp_path: Path) -> None:
    _fit(tmp_path / "a", 2, ModelCheckpoint(save_last=True, max_overhead=1e-9))
    last = tmp_path / "a" / "checkpoints" / "last.ckpt"
    assert _step_of(last) == 4
    counter = SaveCounter()
    trainer = Trainer(accelerator="cpu", devices=1, max_epochs=5, default_root_dir=tmp_path / "a", logger=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[counter, ModelCheckpoint(save_last=True, max_overhead=1e-9)])
    trainer.fit(TinyClassifier(), tiny_loaders(n=32, batch_size=16)[0], ckpt_path=str(last))
    assert counter.steps == [6, 10]
    assert _step_of(last) == 10


@pytest.mark.parametrize("value", [0, -0.1, 1.5, True, "1%"])
def test_max_overhead_must_be_a_fraction(value: Any) -> None:
    with pytest.raises(ConfigError, match="max_overhead") as info:
        ModelCheckpoint(max_overhead=value)
    assert "Fix: write max_overhead=0.01" in str(info.value)
