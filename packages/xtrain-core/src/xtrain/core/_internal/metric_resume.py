"""Checks of the logged-values state a checkpoint carries (``MetricStore.checkpoint_state``), read from a file.

A checkpoint is data from disk: each rank's entry must be exactly the shape the store writes (scalar tensors, known
reductions, plain flags and names) before :meth:`MetricStore.resume_from` takes it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["logged_state_problems"]

_EPOCH_KEYS = {"total", "weight", "reduce_fx", "sync_dist", "prog_bar", "logger", "key"}
_REDUCE = ("mean", "sum", "max", "min")
_MAX_KEYS = 100_000


def logged_state_problems(state: Any) -> list[str]:
    """Why ``state`` (one rank's ``logged`` entry) cannot be resumed from; empty when it can."""
    if not isinstance(state, dict) or set(state) != {"epoch", "callback_metrics"}:
        return ["is not {'epoch': ..., 'callback_metrics': ...}"]
    epoch, latest = state["epoch"], state["callback_metrics"]
    if not isinstance(epoch, dict) or not isinstance(latest, dict) or len(epoch) + len(latest) > _MAX_KEYS:
        return ["'epoch' and 'callback_metrics' must be dicts (of at most 100000 keys together)"]
    problems = [f"callback_metrics[{key!r}] is not a scalar tensor" for key, value in latest.items()
                if not isinstance(key, str) or not _scalar(value)]
    for name, acc in epoch.items():
        if not isinstance(name, str) or not isinstance(acc, dict) or set(acc) != _EPOCH_KEYS:
            problems.append(f"epoch[{name!r}] is not an aggregate of the keys {sorted(_EPOCH_KEYS)}")
        elif not (_scalar(acc["total"]) and acc["total"].is_floating_point() and acc["reduce_fx"] in _REDUCE
                  and type(acc["weight"]) is float and math.isfinite(acc["weight"]) and acc["weight"] >= 0
                  and all(type(acc[k]) is bool for k in ("sync_dist", "prog_bar", "logger"))
                  and isinstance(acc["key"], str)):
            problems.append(f"epoch[{name!r}] holds a value of another type or out of range")
    return problems


def _scalar(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.ndim == 0 and not value.is_complex() and value.device.type == "cpu"
