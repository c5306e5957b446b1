"""Walking nested batches: tensors inside lists, tuples, dicts, named tuples and dataclasses."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch

__all__ = ["apply_to_tensors", "move_to_device", "numbers_to_tensors", "other_leaves"]

_T = TypeVar("_T")


def _map_leaves(data: Any, leaf: Callable[[Any], Any], *, dataclasses_too: bool) -> Any:
    """``data`` rebuilt with ``leaf`` applied to every leaf of its lists, tuples (named too) and mappings, and of
    its dataclasses when ``dataclasses_too``; the one traversal the helpers below share."""
    if isinstance(data, torch.Tensor):
        return leaf(data)
    if isinstance(data, (list, tuple)):
        items = [_map_leaves(d, leaf, dataclasses_too=dataclasses_too) for d in data]
        if isinstance(data, tuple) and hasattr(data, "_fields"):
            return type(data)(*items)
        return type(data)(items)
    if isinstance(data, Mapping):
        return type(data)({k: _map_leaves(v, leaf, dataclasses_too=dataclasses_too)  # type: ignore[call-arg]
                           for k, v in data.items()})
    if dataclasses_too and dataclasses.is_dataclass(data) and not isinstance(data, type):
        changes = {f.name: _map_leaves(getattr(data, f.name), leaf, dataclasses_too=True)
                   for f in dataclasses.fields(data) if f.init}
        return dataclasses.replace(data, **changes)
    return leaf(data)


def apply_to_tensors(data: _T, fn: Callable[[torch.Tensor], torch.Tensor]) -> _T:
    """Return ``data`` with ``fn`` applied to every tensor in it; other leaves are returned unchanged."""
    return _map_leaves(data, lambda x: fn(x) if isinstance(x, torch.Tensor) else x,  # type: ignore[no-any-return]
                       dataclasses_too=True)


def other_leaves(data: Any) -> list[Any]:
    """The leaves of ``data`` that are neither tensors nor ``None`` (what a collective cannot send)."""
    found: list[Any] = []
    _map_leaves(data, lambda x: found.append(x) if x is not None and not isinstance(x, torch.Tensor) else None,
                dataclasses_too=True)
    return found


def numbers_to_tensors(data: _T, device: torch.device) -> _T:
    """Turn every plain ``int``/``float``/``bool`` leaf of ``data`` into a tensor on ``device`` (collectives take
    numbers and nested collections of them, as Lightning's do); tensors are moved to ``device``."""

    def convert(x: Any) -> Any:
        if isinstance(x, (bool, int, float)):
            return torch.tensor(x, device=device)
        return x.to(device) if isinstance(x, torch.Tensor) else x

    return _map_leaves(data, convert, dataclasses_too=False)  # type: ignore[no-any-return]


def move_to_device(data: _T, device: torch.device) -> _T:
    """Move every tensor in ``data`` to ``device`` (non-blocking when the source is pinned memory)."""
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=data.is_pinned()) if data.device != device else data  # type: ignore[return-value]
    if isinstance(data, (list, tuple)) and _all_on(data, device):
        return data
    return apply_to_tensors(data, lambda t: t.to(device, non_blocking=t.is_pinned()) if t.device != device else t)


def _all_on(items: list[Any] | tuple[Any, ...], device: torch.device) -> bool:
    """Whether every item is a tensor already on ``device``: the common batch, ``(x, y)`` on the CPU, is then used as
    it is, at every step, for a few attribute reads instead of rebuilding it (``device.type`` alone costs more; a
    loop, as ``all()`` over a generator costs twice as much)."""
    for item in items:  # noqa: SIM110
        if not (isinstance(item, torch.Tensor) and item.device == device):
            return False
    return True
