"""Which values a ``weights_only=True`` load reads back: the rule for everything xtrain writes into a checkpoint.

Every checkpoint is read with ``weights_only=True`` (a file can never run code), so a value outside this rule makes
the whole file unloadable, and the user finds out at the resume that needed it. The Engine refuses such a value in
``engine.save``; the Trainer leaves such hyperparameters out of its checkpoints.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

__all__ = ["first_unloadable"]

# Exact types: a namedtuple, an IntEnum or a numpy number subclasses one of them and is still refused by the load.
_LEAVES = frozenset({int, float, bool, complex, str, bytes, bytearray, type(None), torch.Size, torch.dtype, torch.device})
_CONTAINERS = frozenset({dict, OrderedDict, list, tuple, set})


def first_unloadable(value: Any, where: str) -> tuple[str, Any] | None:
    """The first part of ``value`` that a ``weights_only`` load refuses, as (its path from ``where``, the part), or
    ``None`` when all of it loads: tensors, numbers, strings, bytes, ``None``, dtypes, devices, sizes, and lists,
    tuples, sets and dicts of them."""
    if isinstance(value, torch.Tensor) or type(value) in _LEAVES:
        return None
    if type(value) in _CONTAINERS:
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(value, dict) and type(key) not in _LEAVES:
                return f"{where} (a key)", key
            found = first_unloadable(item, f"{where}[{key!r}]")
            if found is not None:
                return found
        return None
    return where, value
