"""Walking nested batches: tensors inside lists, tuples, dicts, named tuples and dataclasses."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TypeVar

import torch

__all__ = ["apply_to_tensors", "move_to_device", "numbers_to_tensors"]

_T = TypeVar("_T")


def apply_to_tensors(data: _T, fn: Callable[[torch.Tensor], torch.Tensor]) -> _T:
    """Return ``data`` with ``fn`` applied to every tensor in it; other leaves are returned unchanged."""
    if isinstance(data, torch.Tensor):
        return fn(data)  # type: ignore[return-value]
    if isinstance(data, (list, tuple)):
        items = [apply_to_tensors(d, fn) for d in data]
        if isinstance(data, tuple) and hasattr(data, "_fields"):
            return type(data)(*items)  # type: ignore[return-value]
        return type(data)(items)  # type: ignore[call-arg]
    if isinstance(data, Mapping):
        return type(data)({k: apply_to_tensors(v, fn) for k, v in data.items()})  # type: ignore[call-arg]
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        changes = {f.name: apply_to_tensors(getattr(data, f.name), fn) for f in dataclasses.fields(data) if f.init}
        return dataclasses.replace(data, **changes)  # type: ignore[type-var]
    return data


def numbers_to_tensors(data: _T, device: torch.device) -> _T:
    """Turn every plain ``int``/``float``/``bool`` leaf of ``data`` into a tensor on ``device`` (collectives take
    numbers and nested collections of them, as Lightning's do); tensors are moved to ``device``."""
    if isinstance(data, (bool, int, float)):
        return torch.tensor(data, device=device)  # type: ignore[return-value]
    if isinstance(data, torch.Tensor):
        return data.to(device)  # type: ignore[return-value]
    if isinstance(data, (list, tuple)):
        items = [numbers_to_tensors(d, device) for d in data]
        if isinstance(data, tuple) and hasattr(data, "_fields"):
            return type(data)(*items)  # type: ignore[return-value]
        return type(data)(items)  # type: ignore[call-arg]
    if isinstance(data, Mapping):
        return type(data)({k: numbers_to_tensors(v, device) for k, v in data.items()})  # type: ignore[call-arg]
    return data


def move_to_device(data: _T, device: torch.device) -> _T:
    """Move every tensor in ``data`` to ``device`` (non-blocking when the source is pinned memory)."""
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=data.is_pinned()) if data.device != device else data  # type: ignore[return-value]
    return apply_to_tensors(data, lambda t: t.to(device, non_blocking=t.is_pinned()) if t.device != device else t)
