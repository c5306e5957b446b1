"""Casting floating point tensors inside nested batches, and a default-dtype context.

xtrain-core keeps its batch walker private, so this package carries its own small one rather than reaching into
core's ``_internal`` (which has no compatibility promise across core versions).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import torch

__all__ = ["DefaultDtype", "cast_floating"]


def cast_floating(data: Any, dtype: torch.dtype, *, only: torch.dtype | None = None) -> Any:
    """Return ``data`` with every floating point tensor cast to ``dtype``.

    Integer and boolean tensors (labels, masks, token ids) and non-tensor leaves are returned unchanged, and so are
    the containers' types (lists, tuples, named tuples, mappings, dataclasses). With ``only``, just the tensors of
    that dtype are cast (a mixed precision's bfloat16 outputs to float32, leaving a float64 one alone).
    """
    if isinstance(data, torch.Tensor):
        wanted = data.is_floating_point() if only is None else data.dtype == only
        return data.to(dtype) if wanted and data.dtype != dtype else data
    if isinstance(data, (list, tuple)):
        items = [cast_floating(d, dtype, only=only) for d in data]
        if isinstance(data, tuple) and hasattr(data, "_fields"):
            return type(data)(*items)
        return type(data)(items)
    if isinstance(data, Mapping):
        return type(data)({k: cast_floating(v, dtype, only=only) for k, v in data.items()})  # type: ignore[call-arg]
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        changes = {f.name: cast_floating(getattr(data, f.name), dtype, only=only)
                   for f in dataclasses.fields(data) if f.init}
        return dataclasses.replace(data, **changes)
    return data


class DefaultDtype:
    """Set ``torch``'s default floating dtype inside a ``with`` block and restore the previous one after.

    ``-true`` precisions run the step in it, so tensors a step creates (``torch.zeros(n)``, a new ``nn.Linear``)
    get the training dtype instead of float32 and no op silently promotes the computation back to float32.
    A class rather than a generator-based context manager because it is entered on every step.
    """

    __slots__ = ("_dtype", "_previous")

    def __init__(self, dtype: torch.dtype) -> None:
        self._dtype = dtype
        self._previous: list[torch.dtype] = []

    def __enter__(self) -> None:
        self._previous.append(torch.get_default_dtype())
        torch.set_default_dtype(self._dtype)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        torch.set_default_dtype(self._previous.pop())
