"""``ReduceLROnPlateau`` with the metric it monitors, for the ``lr_scheduler:`` of a config (LightningCLI's)."""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["ReduceLROnPlateau"]


class ReduceLROnPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """torch's ``ReduceLROnPlateau`` that also names the logged metric it steps on.

    A config's ``lr_scheduler`` builds the scheduler alone, so torch's class leaves nowhere to say what it monitors
    (``configure_optimizers`` returns ``{"scheduler": ..., "monitor": ...}`` instead); this one takes ``monitor``
    and the CLI passes it on: ``lr_scheduler: {class_path: xtrain.core.cli.ReduceLROnPlateau, init_args: {monitor:
    val_loss, patience: 3}}``.

    The arguments after ``monitor`` are torch's, with its defaults.

    Args:
        optimizer: The optimizer (the CLI passes it).
        monitor: The logged key whose value the scheduler steps on (e.g. ``"val_loss"``).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, monitor: str, mode: Literal["min", "max"] = "min",
                 factor: float = 0.1, patience: int = 10, threshold: float = 1e-4,
                 threshold_mode: Literal["rel", "abs"] = "rel", cooldown: int = 0,
                 min_lr: float | list[float] = 0.0, eps: float = 1e-8) -> None:
        super().__init__(optimizer, mode=mode, factor=factor, patience=patience, threshold=threshold,
                         threshold_mode=threshold_mode, cooldown=cooldown, min_lr=min_lr, eps=eps)
        self.monitor = monitor
