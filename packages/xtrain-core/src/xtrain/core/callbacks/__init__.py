"""Built-in callbacks."""

from __future__ import annotations

from typing import Any

from xtrain.core.callbacks.callback import Callback
from xtrain.core.callbacks.early_stopping import EarlyStopping
from xtrain.core.callbacks.lr_monitor import LearningRateMonitor
from xtrain.core.callbacks.model_checkpoint import ModelCheckpoint
from xtrain.core.callbacks.model_summary import ModelSummary
from xtrain.core.callbacks.progress import ProgressBar

__all__ = ["Callback", "EarlyStopping", "LearningRateMonitor", "ModelCheckpoint", "ModelSummary", "ProgressBar",
           "RichProgressBar", "default_progress_bar"]


def default_progress_bar() -> ProgressBar:
    """The rich progress bar when ``rich`` is installed, the plain one otherwise."""
    import importlib.util

    if importlib.util.find_spec("rich") is not None:
        from xtrain.core.callbacks.rich_progress import RichProgressBar

        return RichProgressBar()
    return ProgressBar()


def __getattr__(name: str) -> Any:
    if name == "RichProgressBar":
        from xtrain.core.callbacks.rich_progress import RichProgressBar

        return RichProgressBar
    raise AttributeError(name)
