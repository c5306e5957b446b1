"""``trainer.estimated_stepping_batches``: the optimizer steps a fit will take, for schedulers such as OneCycleLR."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

__all__ = ["estimated_stepping_batches"]


def estimated_stepping_batches(trainer: Trainer) -> int | float:
    """``max_steps`` when set; else the training batches per epoch (loaded now if ``configure_optimizers`` asks
    before the dataloaders are set up) over ``accumulate_grad_batches``, times ``max_epochs``."""
    if trainer.max_steps != -1 and trainer.max_epochs == -1:
        return trainer.max_steps
    if not math.isfinite(trainer.num_training_batches) and trainer.state == "fit" and trainer.train_dataloader is None:
        trainer._setup_dataloaders("fit")
    per_epoch = trainer.num_training_batches
    if not math.isfinite(per_epoch):
        if trainer.max_steps != -1:
            return trainer.max_steps
        if trainer.state is None and trainer.train_dataloader is None:
            raise ConfigError("estimated_stepping_batches", None, "is read before fit(): it is counted from the "
                              "training dataloader, which fit() brings.",
                              fix="read trainer.estimated_stepping_batches inside configure_optimizers() (fit has "
                                  "the data then), or set max_steps=... to know it in advance.")
        raise ConfigError("max_steps", -1, "is needed to estimate the steps of a fit whose dataloader has no length.",
                          fix="set max_steps=... (or give the dataloader a length).")
    steps = math.ceil(per_epoch / trainer.accumulate_grad_batches) * max(trainer.max_epochs, 1)
    return min(steps, trainer.max_steps) if trainer.max_steps != -1 else steps
