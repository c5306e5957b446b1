"""Hook context, hyperparameters and logging beside Lightning 2.6.6 (outside trials HK, HP and LG): what a Lightning
user's module, callback or checkpoint script sees."""

from __future__ import annotations

import csv
import dataclasses
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from xtrain.core import CSVLogger, Trainer, TrainModule
from xtrain.core.errors import CheckpointError, ConfigError
from xtrain.core.testing import TinyClassifier, tiny_loaders

QUIET: dict[str, Any] = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False}


# -- HK: the context of the evaluation hooks ----------------------------------------------------------------------
class Probe(TinyClassifier):
    """Runs a forward pass in the epoch-end hooks, as code that logs sample predictions does."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen = nn.BatchNorm1d(4)
        self.seen: list[tuple[str, bool, bool, bool]] = []

    def _probe(self, hook: str) -> None:
        out = self(torch.zeros(2, 16))
        out.numpy()  # raised "Can't call numpy() on Tensor that requires grad" in these hooks
        self.seen.append((hook, torch.is_grad_enabled(), torch.is_inference_mode_enabled(), out.requires_grad))

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass

    def test_step(self, batch: Any, batch_idx: int) -> None:
        pass

    def on_validation_epoch_end(self) -> None:
        self._probe("on_validation_epoch_end")

    def on_test_epoch_end(self) -> None:
        self._probe("on_test_epoch_end")

    def on_predict_epoch_end(self) -> None:
        self._probe("on_predict_epoch_end")

    def on_validation_model_eval(self) -> None:
        assert self.trainer.validating or self.trainer.sanity_checking  # the stage is set before the switch
        super().on_validation_model_eval()


def test_evaluation_hooks_run_without_grad_and_modes_come_back_as_they_were() -> None:
    train, val = tiny_loaders(n=32, batch_size=16)
    module = Probe()
    module.frozen.eval()  # a frozen submodule stays in eval after each stage
    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, num_sanity_val_steps=0, **QUIET)
    trainer.fit(module, train, val)
    trainer.validate(module, val)
    trainer.test(module, val)
    trainer.predict(module, val)
    assert module.seen == [("on_validation_epoch_end", False, False, False),  # in fit: no_grad, as Lightning
                           ("on_validation_epoch_end", False, True, False),  # standalone: inference mode
                           ("on_test_epoch_end", False, True, False), ("on_predict_epoch_end", False, True, False)]
    assert module.training and module.net.training  # after predict too (it stayed in eval)
    assert not module.frozen.training


# -- HP: hyperparameters and load_from_checkpoint -------------------------------------------------------------------
class Parent(TrainModule):
    def __init__(self, lr: float = 0.1, **kwargs: Any) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.head = nn.Linear(16, 4)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return nn.functional.cross_entropy(self.head(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class Child(Parent):
    def __init__(self, classes: int = 4, lr: float = 0.3) -> None:
        super().__init__(lr=lr)
        self.head = nn.Linear(16, classes)


def _saved(tmp_path: Path, module: TrainModule, **options: Any) -> Path:
    train, _ = tiny_loaders(n=16, batch_size=16)
    trainer = Trainer(max_epochs=1, enable_checkpointing=False, default_root_dir=tmp_path, **QUIET, **options)
    trainer.fit(module, train)
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    return path


def test_a_parent_that_saves_records_the_subclass_arguments_and_reloads_them(tmp_path: Path) -> None:
    module = Child(classes=5)
    assert dict(module.hparams) == {"lr": 0.3, "classes": 5}  # was {"lr": 0.3}: classes=4 came back
    path = _saved(tmp_path, module, logger=False)
    checkpoint = torch.load(path, weights_only=True)
    assert checkpoint["hparams_name"] == "kwargs"  # as Lightning's
    assert Child.load_from_checkpoint(path).head.out_features == 5


def test_load_from_checkpoint_on_an_instance_is_refused_and_weights_only_is_no_hyperparameter(tmp_path: Path) -> None:
    path = _saved(tmp_path, Parent(lr=0.2), logger=False)
    model = Parent()
    assert hasattr(model, "load_from_checkpoint")
    with pytest.raises(TypeError, match=r"Call it on the class and use what it returns"):
        model.load_from_checkpoint(path)
    with pytest.warns(UserWarning, match="weights_only=False"):
        loaded = Parent.load_from_checkpoint(path, weights_only=False)
    assert dict(loaded.hparams) == {"lr": 0.2}  # not {'lr': 0.2, 'weights_only': False}


def test_a_lightning_checkpoint_of_a_class_with_kwargs_is_built_from_its_arguments(tmp_path: Path) -> None:
    """Lightning names its one-by-one hyperparameters "kwargs": the class's **kwargs got them as one dict (lr kept
    its default)."""
    source = Parent(lr=0.5, extra=3)
    path = tmp_path / "lightning.ckpt"
    torch.save({"state_dict": source.state_dict(), "hyper_parameters": {"lr": 0.5, "extra": 3},
                "hparams_name": "kwargs", "pytorch-lightning_version": "2.6.6"}, path)
    loaded = Parent.load_from_checkpoint(path)
    assert dict(loaded.hparams) == {"lr": 0.5, "extra": 3}


class TakesADictNamedKwargs(Parent):
    def __init__(self, kwargs: dict[str, int] | None = None, lr: float = 0.1) -> None:
        super().__init__(lr=lr)
        self.options = kwargs


def test_an_argument_named_kwargs_comes_back_as_itself(tmp_path: Path) -> None:
    path = _saved(tmp_path, TakesADictNamedKwargs({"depth": 2}, lr=0.2), logger=False)
    loaded = TakesADictNamedKwargs.load_from_checkpoint(path)
    assert loaded.options == {"depth": 2} and loaded.hparams.lr == 0.2


@dataclasses.dataclass
class Config:
    width: int = 8


class WithObjects(TinyClassifier):
    def __init__(self, config: Config | None = None, backbone: nn.Module | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.config = config


def test_objects_are_warned_about_and_their_hparams_yaml_text_is_not_passed_back(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match=r"'backbone' is an nn.Module .*ignore=\['backbone'\]"):
        module = WithObjects(Config(3), nn.Identity())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = _saved(tmp_path, module, logger=CSVLogger(tmp_path, name="", version=0))
    hparams_file = tmp_path / "version_0" / "hparams.yaml"
    assert "Config(width=3)" in hparams_file.read_text()
    with pytest.raises(CheckpointError, match=r"\['backbone', 'config'\] are text the loggers wrote"):
        WithObjects.load_from_checkpoint(path, hparams_file=hparams_file)
    loaded = WithObjects.load_from_checkpoint(path, hparams_file=hparams_file, config=Config(3),
                                              backbone=nn.Identity())
    assert loaded.config == Config(3)


def test_the_loggers_get_the_hyperparameters_as_saved_not_as_edited_later(tmp_path: Path) -> None:
    module = TinyClassifier(lr=0.05)
    module.hparams.lr = 123.0
    _saved(tmp_path, module, logger=CSVLogger(tmp_path, name="", version=0))
    assert "lr: 0.05" in (tmp_path / "version_0" / "hparams.yaml").read_text()
    assert torch.load(tmp_path / "m.ckpt", weights_only=True)["hyper_parameters"]["lr"] == 123.0  # as Lightning


# -- LG: what self.log and the CSV logger do ------------------------------------------------------------------------
class LogsNothing(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("lost", loss, on_step=False)  # in training on_epoch defaults to False: neither
        return loss


def test_a_value_logged_neither_per_step_nor_per_epoch_is_refused() -> None:
    train, _ = tiny_loaders(n=16, batch_size=16)
    with pytest.raises(ConfigError, match=r"on_step=False.*neither this step's value nor the epoch's.*on_epoch=True"):
        Trainer(max_epochs=1, logger=False, enable_checkpointing=False, **QUIET).fit(LogsNothing(), train)


def test_a_new_run_in_an_existing_csv_version_replaces_its_rows(tmp_path: Path) -> None:
    train, _ = tiny_loaders(n=32, batch_size=16)

    def run(epochs: int) -> list[dict[str, str]]:
        logger = CSVLogger(tmp_path, name="", version=0)
        trainer = Trainer(max_epochs=epochs, logger=logger, log_every_n_steps=1, enable_checkpointing=False, **QUIET)
        trainer.fit(TinyClassifier(), train)
        trainer.validate(trainer.module, train)  # the same logger's later stage appends
        with (tmp_path / "version_0" / "metrics.csv").open() as f:
            return list(csv.DictReader(f))

    first = run(2)
    with pytest.warns(UserWarning, match="already holds an earlier run's metrics.csv; this run replaces it"):
        second = run(1)
    assert [r["step"] for r in first if r["train_loss"]] == ["0", "1", "2", "3"]
    assert [r["step"] for r in second if r["train_loss"]] == ["0", "1"]  # was the first run's rows, then these
    assert any(r.get("val_loss") for r in second)

