"""Trainer and module attributes that Lightning callbacks read (trial F, case 20): each raised AttributeError.

Expected values are what Lightning 2.6.6 returned for the same script (one CPU process, ``max_epochs=1``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import CheckpointError, Trainer
from xtrain.core.callbacks import Callback, ModelCheckpoint
from xtrain.core.testing import TinyClassifier, tiny_loaders


def _trainer(tmp_path: Path, **kwargs: Any) -> Trainer:
    settings: dict[str, Any] = {"accelerator": "cpu", "max_epochs": 1, "logger": False, "enable_model_summary": False,
                                "default_root_dir": tmp_path, **kwargs}
    return Trainer(**settings)


class Seen(Callback):
    def __init__(self, names: list[str]) -> None:
        self.names, self.values = names, {}

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.values = {name: getattr(trainer, name) for name in self.names}


def test_trainer_attributes_as_lightning_returns_them(tmp_path: Path) -> None:
    names = ["num_devices", "num_nodes", "node_rank", "device_ids", "min_epochs", "min_steps", "overfit_batches",
             "reload_dataloaders_every_n_epochs", "enable_validation", "progress_bar_callback"]
    seen = Seen(names)
    trainer = _trainer(tmp_path, callbacks=[seen], enable_checkpointing=False)
    trainer.fit(TinyClassifier(), *tiny_loaders())
    values = seen.values
    assert {k: v for k, v in values.items() if k != "progress_bar_callback"} == {
        "num_devices": 1, "num_nodes": 1, "node_rank": 0, "device_ids": [0], "min_epochs": 0, "min_steps": None,
        "overfit_batches": 0.0, "reload_dataloaders_every_n_epochs": 0, "enable_validation": True}
    assert values["progress_bar_callback"] is not None and values["progress_bar_callback"] in trainer.callbacks
    set_ = _trainer(tmp_path, max_epochs=3, min_epochs=2, min_steps=5, reload_dataloaders_every_n_epochs=3,
                    enable_progress_bar=False,
                    limit_val_batches=0)
    assert (set_.min_epochs, set_.min_steps, set_.reload_dataloaders_every_n_epochs) == (2, 5, 3)
    assert set_.progress_bar_callback is None
    set_.fit(TinyClassifier(), tiny_loaders()[0])
    assert set_.enable_validation is False  # limit_val_batches=0


def test_default_root_dir_is_a_str_that_still_joins_as_a_path(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path)
    root = trainer.default_root_dir
    assert isinstance(root, str) and root == str(tmp_path) and root == tmp_path
    assert os.path.join(root, "x") == str(tmp_path / "x") and root / "x" == tmp_path / "x"  # type: ignore[operator]


def test_module_attributes_default_as_lightnings() -> None:
    module = TinyClassifier()
    assert module.example_input_array is None and module.on_gpu is False and module.strict_loading is True
    module.example_input_array = torch.zeros(2, 16)
    assert module.example_input_array.shape == (2, 16)


class Grown(TinyClassifier):
    """A fine-tune whose checkpoints hold only the head (Lightning's strict_loading recipe)."""

    def __init__(self) -> None:
        super().__init__()
        self.strict_loading = False

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if not k.startswith("net.0")}


def test_strict_loading_false_restores_a_checkpoint_of_some_weights(tmp_path: Path) -> None:
    first = Grown()
    trainer = _trainer(tmp_path, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ck", save_last=True)])
    trainer.fit(first, *tiny_loaders())
    path = tmp_path / "ck" / "last.ckpt"
    second = Grown()
    _trainer(tmp_path, max_epochs=2).fit(second, *tiny_loaders(), ckpt_path=path)
    strict = TinyClassifier()  # the same file into a module that wants every weight: refused, as before
    with pytest.raises(CheckpointError, match="missing"):
        _trainer(tmp_path, max_epochs=2).fit(strict, *tiny_loaders(), ckpt_path=path)


def test_fit_loop_is_left_as_it_is_by_migrate_and_names_what_it_offers(tmp_path: Path) -> None:
    """migrate flagged ``trainer.fit_loop`` as not public although the view works; an internal it lacks says what
    there is instead of a bare AttributeError."""
    from xtrain.core.migrate import migrate_source

    code = "from lightning.pytorch import Trainer\n\ndef f(trainer):\n    trainer.fit_loop.setup_data()\n"
    migrated = migrate_source(code)
    assert "trainer.fit_loop.setup_data()\n" in migrated and "xtrain migrate:" not in migrated
    trainer = _trainer(tmp_path)
    with pytest.raises(AttributeError, match=r"fit_loop\.epoch_loop .*setup_data\(\), max_epochs"):
        trainer.fit_loop.epoch_loop


def test_a_lightning_checkpoint_as_ckpt_path_points_to_load_from_checkpoint(tmp_path: Path) -> None:
    """A file in Lightning's layout (its keys as Lightning 2.6.6 writes them) given to fit: the message names
    Lightning and the way that works (test takes it: test_lightning_checkpoints.py)."""
    module = TinyClassifier()
    path = tmp_path / "lightning.ckpt"
    torch.save({"epoch": 1, "global_step": 8, "pytorch-lightning_version": "2.6.6", "state_dict": module.state_dict(),
                "loops": {}, "callbacks": {}, "optimizer_states": [], "lr_schedulers": [],
                "hparams_name": "kwargs", "hyper_parameters": {"lr": 0.1}}, path)
    with pytest.raises(CheckpointError, match=r"written by Lightning 2\.6\.6.*load_from_checkpoint\(path\)"):
        _trainer(tmp_path).fit(module, *tiny_loaders(), ckpt_path=path)
