"""What an outside trial of Lightning scripts found at run time (stop 47): each case as a Lightning user meets it."""

from __future__ import annotations

import inspect
import pickle
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import Trainer, TrainModule
from xtrain.core.callbacks import ModelCheckpoint, ProgressBar
from xtrain.core.errors import ConfigError

QUIET: dict[str, Any] = {"accelerator": "cpu", "logger": False, "enable_model_summary": False}


class _Net(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.1), torch.nn.Linear(4, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.net(batch[0]).pow(2).mean()

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.net(batch[0])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader() -> DataLoader[Any]:
    return DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)


def _fit_warnings(module: TrainModule, tmp_path: Path) -> list[str]:
    trainer = Trainer(max_epochs=1, default_root_dir=tmp_path, enable_checkpointing=False, enable_progress_bar=False,
                      **QUIET)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        trainer.fit(module, _loader())
    return [str(w.message) for w in seen if "eval mode" in str(w.message)]


# -- MisconfigurationException(message), as xtrain migrate writes it ------------------------------------------------
def test_a_config_error_raised_with_a_message_alone_keeps_it_and_is_caught() -> None:
    with pytest.raises(ConfigError) as caught:
        raise ConfigError("n must be >= 0")
    assert str(caught.value) == "n must be >= 0" and isinstance(caught.value, ValueError)
    again = pickle.loads(pickle.dumps(caught.value))  # a ConfigError that crossed a process boundary
    assert type(again) is ConfigError and str(again) == "n must be >= 0"


def test_the_full_config_error_still_names_argument_value_choices_and_fix() -> None:
    error = ConfigError("mode", "mid", "is not a mode.", choices=["min", "max"], fix="write mode='min'.")
    assert str(error) == "mode='mid': is not a mode. Valid choices: 'max', 'min'. Fix: write mode='min'."
    assert (error.argument, error.value, error.fix) == ("mode", "mid", "write mode='min'.")
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


# -- Lightning names in xtrain's modules -------------------------------------------------------------------------
@pytest.mark.parametrize(("statement", "hint"), [
    ("from xtrain.core.callbacks import TQDMProgressBar", "from xtrain.core.callbacks import ProgressBar"),
    ("from xtrain.core.callbacks import RichModelSummary", "from xtrain.core.callbacks import ModelSummary"),
    ("from xtrain.core.cli import LightningCLI", "from xtrain.core.cli import XtrainCLI"),
    ("from xtrain.core.loggers import NeptuneLogger", "no xtrain equivalent"),
])
def test_importing_a_lightning_name_from_an_xtrain_module_says_what_to_write(statement: str, hint: str) -> None:
    with pytest.raises(ImportError, match="xtrain migrate") as caught:
        exec(statement, {})
    assert hint in str(caught.value)


def test_other_missing_names_stay_plain_attribute_errors() -> None:
    import xtrain.core.callbacks as callbacks
    import xtrain.core.profilers as profilers

    assert not hasattr(callbacks, "NoSuchCallback") and not hasattr(profilers, "__wrapped__")
    with pytest.raises(AttributeError, match="ModelSummary"):
        callbacks.RichModelSummary


def test_trainer_lightning_module_names_trainer_module() -> None:
    trainer = Trainer(**QUIET)
    with pytest.raises(AttributeError, match=r"trainer\.module") as caught:
        trainer.lightning_module  # type: ignore[attr-defined]
    assert "xtrain migrate" in str(caught.value)
    assert not hasattr(trainer, "lightning_module") and not hasattr(trainer, "no_such_attribute")
    with pytest.raises(AttributeError, match=r"trainer\.strategy\.accelerator"):
        trainer.accelerator  # type: ignore[attr-defined]


def test_a_property_failing_with_attribute_error_inside_keeps_its_own_message() -> None:
    class Mine(Trainer):
        @property
        def broken(self) -> int:
            raise AttributeError("the inner reason")

    with pytest.raises(AttributeError, match="the inner reason"):
        Mine(**QUIET).broken


# -- the default callbacks' switches ----------------------------------------------------------------------------
def test_a_model_checkpoint_passed_with_checkpointing_off_still_runs(tmp_path: Path) -> None:
    """The switch adds or leaves out the default callback (documented); the one passed is the user's."""
    trainer = Trainer(max_epochs=1, default_root_dir=tmp_path, enable_checkpointing=False, enable_progress_bar=False,
                      callbacks=[ModelCheckpoint(tmp_path / "ckpts")], **QUIET)
    trainer.fit(_Net(), _loader())
    assert [p.name for p in (tmp_path / "ckpts").iterdir()] == ["epoch=0-step=2.ckpt"]


def test_two_progress_bars_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"callbacks=\['ProgressBar', 'ProgressBar'\].*more than one progress bar"):
        Trainer(callbacks=[ProgressBar(), ProgressBar()], **QUIET)


# -- a fit that starts in eval mode ------------------------------------------------------------------------------
def test_a_fresh_module_fits_without_an_eval_mode_warning(tmp_path: Path) -> None:
    assert _fit_warnings(_Net(), tmp_path) == []


def test_a_fit_after_predict_trains_in_train_mode(tmp_path: Path) -> None:
    """As Lightning 2.6: predict puts every submodule back in the mode it found it in (it left them in eval, and the
    next fit trained with dropout off)."""
    module = _Net()
    Trainer(enable_checkpointing=False, enable_progress_bar=False, **QUIET).predict(module, _loader())
    assert all(sub.training for sub in module.modules())
    assert _fit_warnings(module, tmp_path) == []
    module.eval()
    (message,) = _fit_warnings(module, tmp_path)
    assert "5 of 5 modules in eval mode" in message and "net.1" in message and "model.train()" in message


def test_one_frozen_submodule_is_named(tmp_path: Path) -> None:
    module = _Net()
    module.net[1].eval()
    (message,) = _fit_warnings(module, tmp_path)
    assert "1 of 5 modules in eval mode (net.1)" in message


# -- tracker loggers take Lightning's positional order -----------------------------------------------------------
def test_tracker_loggers_take_lightnings_positional_order() -> None:
    from xtrain.core.loggers import MLFlowLogger, WandbLogger

    def positional(cls: type) -> list[str]:
        params = list(inspect.signature(cls).parameters.values())
        return [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]

    assert positional(WandbLogger) == ["name", "save_dir", "version", "offline"]
    assert positional(MLFlowLogger) == ["experiment_name", "run_name", "tracking_uri", "tags", "save_dir"]


def test_mlflow_logger_with_a_positional_experiment_name_logs_to_that_experiment(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    from xtrain.core.loggers import MLFlowLogger

    logger = MLFlowLogger("my_experiment", tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", save_dir=tmp_path)
    experiment = logger.experiment.get_experiment(logger.experiment_id)
    assert experiment is not None and experiment.name == "my_experiment"
