"""Which arguments a step method takes, found once per run: ``batch_idx`` and ``dataloader_idx`` are optional.

A ``training_step(self, batch)`` receives only the batch; ``batch_idx`` is passed when the method names it, takes
``*args``, or has a second positional parameter under another name. ``dataloader_idx`` is passed only when there
are several dataloaders and the method can take it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["StepArgs", "step_args", "takes_param"]

StepArgs = Callable[[Any, int, int], tuple[Any, ...]]


def takes_param(fn: Callable[..., Any], name: str, *, min_args: int | None = None) -> bool:
    """Whether ``fn`` (a bound method) accepts ``name``: by name, through ``*args``, or by position count."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    if name in params or any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params.values()):
        return True
    positional = [p for p in params.values()
                  if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    return min_args is not None and len(positional) >= min_args


def _batch_only(batch: Any, batch_idx: int, dataloader_idx: int) -> tuple[Any, ...]:
    return (batch,)


def _with_idx(batch: Any, batch_idx: int, dataloader_idx: int) -> tuple[Any, ...]:
    return (batch, batch_idx)


def _with_loader(batch: Any, batch_idx: int, dataloader_idx: int) -> tuple[Any, ...]:
    return (batch, dataloader_idx)


def _with_both(batch: Any, batch_idx: int, dataloader_idx: int) -> tuple[Any, ...]:
    return (batch, batch_idx, dataloader_idx)


def step_args(fn: Callable[..., Any], *, several_loaders: bool = False) -> StepArgs:
    """A function building the positional arguments of ``fn`` from ``(batch, batch_idx, dataloader_idx)``."""
    idx = takes_param(fn, "batch_idx", min_args=2)
    loader = several_loaders and takes_param(fn, "dataloader_idx", min_args=3 if idx else 2)
    if idx:
        return _with_both if loader else _with_idx
    return _with_loader if loader else _batch_only
