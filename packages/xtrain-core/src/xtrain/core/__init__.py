"""xtrain-core: the Trainer, the Engine, the plugin contracts, the registry and the CPU defaults.

Names are imported on first use, so ``import xtrain.core`` costs almost nothing beyond ``import torch``.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from xtrain.core.__about__ import __version__

if TYPE_CHECKING:
    from xtrain.core.accelerator import Accelerator
    from xtrain.core.callbacks import (
        Callback,
        EarlyStopping,
        LearningRateMonitor,
        ModelCheckpoint,
        ModelSummary,
        ProgressBar,
        RichProgressBar,
    )
    from xtrain.core.checkpoint_io import CheckpointIO
    from xtrain.core.datamodule import DataModule
    from xtrain.core.engine import Engine
    from xtrain.core.environment import ClusterEnvironment
    from xtrain.core.errors import (
        CheckpointError,
        ConfigError,
        RankFailedError,
        SIGTERMException,
        XtrainDeprecationWarning,
    )
    from xtrain.core.launcher import Launcher
    from xtrain.core.loggers import CSVLogger, Logger, TensorBoardLogger
    from xtrain.core.module import TrainModule
    from xtrain.core.parallel import ParallelStrategy
    from xtrain.core.precision import Precision
    from xtrain.core.seed import seed_everything
    from xtrain.core.strategy import Strategy
    from xtrain.core.trainer import Trainer

__all__ = [
    "Accelerator", "CSVLogger", "Callback", "CheckpointError", "CheckpointIO", "ClusterEnvironment", "ConfigError",
    "DataModule", "EarlyStopping", "Engine", "Launcher", "LearningRateMonitor", "Logger", "ModelCheckpoint",
    "ModelSummary", "ParallelStrategy", "Precision", "ProgressBar", "RankFailedError", "RichProgressBar",
    "SIGTERMException", "Strategy", "TensorBoardLogger", "TrainModule", "Trainer", "XtrainDeprecationWarning",
    "__version__", "seed_everything",
]

_WHERE = {
    "Accelerator": "accelerator", "Callback": "callbacks", "EarlyStopping": "callbacks", "ModelCheckpoint": "callbacks",
    "ModelSummary": "callbacks", "ProgressBar": "callbacks", "RichProgressBar": "callbacks",
    "LearningRateMonitor": "callbacks", "CheckpointIO": "checkpoint_io",
    "DataModule": "datamodule", "Engine": "engine", "ClusterEnvironment": "environment",
    "CheckpointError": "errors", "ConfigError": "errors", "RankFailedError": "errors", "SIGTERMException": "errors",
    "XtrainDeprecationWarning": "errors", "Launcher": "launcher", "CSVLogger": "loggers", "Logger": "loggers",
    "TensorBoardLogger": "loggers", "TrainModule": "module", "ParallelStrategy": "parallel",
    "Precision": "precision", "seed_everything": "seed", "Strategy": "strategy", "Trainer": "trainer",
}


def __getattr__(name: str) -> Any:
    """As :func:`xtrain.core._internal.lazy_names.lazy_getattr`, written out: importing that module here would add
    two modules to every ``import xtrain.core``."""
    module = _WHERE.get(name)
    if module is None:
        if name.startswith("_"):
            raise AttributeError(f"module 'xtrain.core' has no attribute {name!r}")
        from xtrain.core._internal.migrate.hints import missing_name_error  # LightningModule: names TrainModule

        raise missing_name_error(sys.modules[__name__], name, sys._getframe(1))
    value = getattr(importlib.import_module(f"xtrain.core.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
