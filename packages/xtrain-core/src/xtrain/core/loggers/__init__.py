"""Loggers: where metrics go. CSV is built in; TensorBoard, W&B and MLflow need their packages (extras of the same
names), imported only when such a logger is used."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from xtrain.core._internal.lazy_names import lazy_getattr
from xtrain.core.loggers.csv import CSVLogger
from xtrain.core.loggers.logger import Logger

if TYPE_CHECKING:  # what type checkers see; at run time each is imported on first use (see _LAZY)
    from xtrain.core.loggers.mlflow import MLFlowLogger
    from xtrain.core.loggers.tensorboard import TensorBoardLogger
    from xtrain.core.loggers.tracker import TrackerLogger
    from xtrain.core.loggers.wandb import WandbLogger

__all__ = ["CSVLogger", "Logger", "MLFlowLogger", "TensorBoardLogger", "TrackerLogger", "WandbLogger", "default_logger"]

_LAZY = {"TensorBoardLogger": "tensorboard", "WandbLogger": "wandb", "MLFlowLogger": "mlflow", "TrackerLogger": "tracker"}


def default_logger(root: Path) -> Logger:
    """TensorBoard when the ``tensorboard`` package is installed, else CSV, under ``root/xtrain_logs``."""
    if importlib.util.find_spec("tensorboard") is not None:
        from xtrain.core.loggers.tensorboard import TensorBoardLogger

        return TensorBoardLogger(root)
    return CSVLogger(root)


__getattr__ = lazy_getattr(__name__, _LAZY)
