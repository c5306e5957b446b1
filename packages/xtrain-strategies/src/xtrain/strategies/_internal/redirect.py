"""Running a TrainModule's step methods through a wrapper's ``forward``.

``DistributedDataParallel`` and ``DataParallel`` do their work (gradient-sync bookkeeping, scattering a batch over
devices) only when their ``forward`` is called, while the user's code lives in ``training_step``. Wrapping the
module in :class:`StepRedirect` and calling :func:`call_step` runs the step inside the wrapper's forward, so DDP's
hooks fire for exactly the parameters the step used, and DP replicas run the step on their slice of the batch.

The step's name travels as an attribute set around the call, not as an argument: calling the wrapper with plain
inputs (the Engine does, through ``model(x)``) runs the module's own ``forward``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["StepRedirect", "call_step"]


class _NullMetrics:
    """Swallows ``self.log`` calls made by DataParallel replicas other than the first."""

    def log(self, *args: Any, **kwargs: Any) -> None:
        return None


class _MutedTrainer:
    """The Trainer as seen by a secondary DP replica: everything but logging passes through."""

    _metrics = _NullMetrics()

    def __init__(self, trainer: Any) -> None:
        self.__dict__["_trainer"] = trainer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_trainer"], name)


class StepRedirect(nn.Module):
    """Calls ``module.<name>(*args)`` from ``forward``.

    Args:
        module: The user's TrainModule.
        primary_device: For DataParallel: the device whose replica may log. Replicas on other devices run with a
            Trainer whose ``self.log`` does nothing, so each step logs once (the first device's slice) and never
            from several threads at once. ``None`` (DDP, one device per process) logs from every call.
    """

    def __init__(self, module: nn.Module, *, primary_device: torch.device | None = None) -> None:
        super().__init__()
        self.module = module
        self.primary_device = primary_device
        self.step: str | None = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        module = self.module
        if self.primary_device is not None and _device_of(module) not in (None, self.primary_device):
            trainer = module.__dict__.get("_trainer")
            if trainer is not None and not isinstance(trainer, _MutedTrainer):
                # A replica's __dict__ is its own shallow copy: this never touches the user's module.
                module.__dict__["_trainer"] = _MutedTrainer(trainer)
        target = getattr(module, self.step) if self.step is not None else module
        return target(*args, **kwargs)


def call_step(wrapper: nn.Module, name: str, *args: Any, **kwargs: Any) -> Any:
    """Run ``module.<name>(*args, **kwargs)`` through ``wrapper``'s forward (a StepRedirect, or DDP/DP around one)."""
    redirect = wrapper if isinstance(wrapper, StepRedirect) else wrapper.module
    assert isinstance(redirect, StepRedirect)
    redirect.step = name
    try:
        return wrapper(*args, **kwargs)
    finally:
        redirect.step = None


def _device_of(module: nn.Module) -> torch.device | None:
    for param in module.parameters():
        return param.device
    for buffer in module.buffers():
        return buffer.device
    return None
