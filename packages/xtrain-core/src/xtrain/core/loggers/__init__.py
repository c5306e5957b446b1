"""Loggers: where metrics go. CSV is built in; TensorBoard needs the ``tensorboard`` package."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from xtrain.core.loggers.csv import CSVLogger
from xtrain.core.loggers.logger import Logger

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger", "default_logger"]


def default_logger(root: Path) -> Logger:
    """TensorBoard when the ``tensorboard`` package is installed, else CSV, under ``root/xtrain_logs``."""
    if importlib.util.find_spec("tensorboard") is not None:
        from xtrain.core.loggers.tensorboard import TensorBoardLogger

        return TensorBoardLogger(root)
    return CSVLogger(root)


def __getattr__(name: str) -> Any:
    if name == "TensorBoardLogger":
        from xtrain.core.loggers.tensorboard import TensorBoardLogger

        return TensorBoardLogger
    raise AttributeError(name)
