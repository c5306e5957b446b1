"""The ``xtrain`` command (its full version lives in ``xtrain.core._internal.cli``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from xtrain.core._internal.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from xtrain.core._internal.cli.app import XtrainCLI
    from xtrain.core._internal.cli.plateau import ReduceLROnPlateau
    from xtrain.core._internal.cli.save_config import SaveConfigCallback

__all__ = ["LRSchedulerCallable", "OptimizerCallable", "ReduceLROnPlateau", "SaveConfigCallback", "XtrainCLI", "main"]

OptimizerCallable = Callable[[Iterable[Any]], torch.optim.Optimizer]
"""An init argument that a config fills with an optimizer class (``class_path`` + ``init_args``, or the class as
default); the module calls it with its parameters, as LightningCLI's ``OptimizerCallable``."""

LRSchedulerCallable = Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler]
"""The same for an LR scheduler, called with the optimizer (LightningCLI's ``LRSchedulerCallable``)."""


# jsonargparse is imported only by those who use the CLI classes.
__getattr__ = lazy_getattr(__name__, {"XtrainCLI": "app", "SaveConfigCallback": "save_config",
                                      "ReduceLROnPlateau": "plateau"},
                           package="xtrain.core._internal.cli")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``xtrain`` console script."""
    from xtrain.core._internal.cli import run

    return run(sys.argv[1:] if argv is None else argv)
