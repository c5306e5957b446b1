"""Checks of the logged-values state a checkpoint carries (``MetricStore.checkpoint_state``), read from a file.

A checkpoint is data from disk: each rank's entry must be exactly the shape the store writes (``[number, dtype
name]`` pairs of known dtypes, known reductions, plain flags and names) before :meth:`MetricStore.resume_from` takes
it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from xtrain.core._internal.metrics import LOGGED_DTYPES, REDUCTIONS

__all__ = ["logged_state_problems"]

_EPOCH_KEYS = {"total", "weight", "reduce_fx", "sync_dist", "prog_bar", "logger", "key"}
_MAX_KEYS = 100_000
# The Python type of each dtype name the store writes (``item()`` of such a tensor).
_DTYPES: dict[str, type] = {name: bool if dtype is torch.bool else float if dtype.is_floating_point else int
                            for dtype, name in LOGGED_DTYPES.items()}


def logged_state_problems(state: Any) -> list[str]:
    """Why ``state`` (one rank's ``logged`` entry) cannot be resumed from; empty when it can."""
    if not isinstance(state, dict) or set(state) != {"epoch", "callback_metrics"}:
        return ["is not {'epoch': ..., 'callback_metrics': ...}"]
    epoch, latest = state["epoch"], state["callback_metrics"]
    if not isinstance(epoch, dict) or not isinstance(latest, dict) or len(epoch) + len(latest) > _MAX_KEYS:
        return ["'epoch' and 'callback_metrics' must be dicts (of at most 100000 keys together)"]
    problems = [f"callback_metrics[{key!r}] is not a [number, dtype name] pair" for key, value in latest.items()
                if not isinstance(key, str) or not _pair(value)]
    for name, acc in epoch.items():
        if not isinstance(name, str) or not isinstance(acc, dict) or set(acc) != _EPOCH_KEYS:
            problems.append(f"epoch[{name!r}] is not an aggregate of the keys {sorted(_EPOCH_KEYS)}")
        elif not (_pair(acc["total"], floating=True) and isinstance(acc["reduce_fx"], str)
                  and acc["reduce_fx"] in REDUCTIONS
                  and type(acc["weight"]) is float and math.isfinite(acc["weight"]) and acc["weight"] >= 0
                  and all(type(acc[k]) is bool for k in ("sync_dist", "prog_bar", "logger"))
                  and isinstance(acc["key"], str)):
            problems.append(f"epoch[{name!r}] holds a value of another type or out of range")
    return problems


def _pair(value: Any, *, floating: bool = False) -> bool:
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], str) and value[1] in _DTYPES):
        return False
    number, kind = value[0], _DTYPES[value[1]]
    if floating and kind is not float:
        return False
    if kind is float:
        return type(number) is float
    if kind is bool:
        return type(number) is bool
    return type(number) is int and -(2**63) <= number < 2**63
