"""Small judgements a restore plan makes of values read from a checkpoint, shared by its parts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["SHOWN", "finite", "listed", "same_kind"]

SHOWN = 8


def finite(value: Any) -> bool:
    """Whether a hyperparameter holds no NaN or infinite number (a NaN learning rate trains NaN weights)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(finite(v) for v in value)
    return True


def same_kind(saved: Any, live: Any) -> bool:
    """Whether a saved hyperparameter can stand in for the live one (numbers for numbers, sequences for sequences)."""
    if live is None:
        return True
    if saved is None:
        return isinstance(live, bool)  # optimizer flags (foreach, fused) are None or a bool across torch versions
    for kind in (bool, str, torch.Tensor, (list, tuple), dict):
        if isinstance(live, kind):
            return isinstance(saved, kind)
    if isinstance(live, (int, float)):
        return isinstance(saved, (int, float)) and not isinstance(saved, bool)
    return True


def listed(keys: Sequence[object]) -> str:
    """Keys for an error message: the first :data:`SHOWN` of them, then how many there are in all (a file's keys
    need not be strings)."""
    shown = ", ".join(map(str, keys[:SHOWN]))
    return f"{shown}, ... ({len(keys)} in all)" if len(keys) > SHOWN else shown or "(none)"
