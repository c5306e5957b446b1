"""Loggers: where metrics go. CSV is built in; TensorBoard, W&B and MLflow need their packages (extras of the same
names), imported only when such a logger is used."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from xtrain.core.loggers.csv import CSVLogger
from xtrain.core.loggers.logger import Logger

__all__ = ["CSVLogger", "Logger", "MLFlowLogger", "TensorBoardLogger", "TrackerLogger", "WandbLogger", "default_logger"]

_LAZY = {"TensorBoardLogger": "tensorboard", "WandbLogger": "wandb", "MLFlowLogger": "mlflow", "TrackerLogger": "tracker"}


def default_logger(root: Path) -> Logger:
    """TensorBoard when the ``tensorboard`` package is installed, else CSV, under ``root/xtrain_logs``."""
    if importlib.util.find_spec("tensorboard") is not None:
        from xtrain.core.loggers.tensorboard import TensorBoardLogger

        return TensorBoardLogger(root)
    return CSVLogger(root)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"xtrain.core.loggers.{_LAZY[name]}"), name)
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from xtrain.core._internal.migrate.hints import missing_name_error  # a Lightning name gets a hint naming ours

    raise missing_name_error(sys.modules[__name__], name, sys._getframe(1))
