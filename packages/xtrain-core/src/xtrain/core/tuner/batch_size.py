"""Finding the largest batch size that fits in memory, by growing it until an out-of-memory error."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Literal

import torch

__all__ = ["find_batch_size", "is_out_of_memory"]


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says a device ran out of memory (torch's error, or a backend's message saying so)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "resource_exhausted" in text)


def _release_memory() -> None:
    gc.collect()
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        accelerator.empty_cache()


def find_batch_size(trial: Callable[[int], bool], *, mode: Literal["power", "binsearch"], init_val: int,
                    max_trials: int) -> tuple[int, list[tuple[int, bool]]]:
    """Run ``trial(size)`` (True: it fit and more data exists, False: it fit but the data has no more) with growing
    sizes; returns the largest size that fit and every ``(size, fitted)`` tried.

    ``power`` doubles until a size does not fit; ``binsearch`` then bisects between the last size that fit and the
    first that did not.
    """
    tried: list[tuple[int, bool]] = []
    good, bad = 0, None
    size = init_val
    while len(tried) < max_trials:
        try:
            more = trial(size)
        except Exception as exc:  # only out-of-memory errors are handled; the rest is re-raised
            if not is_out_of_memory(exc):
                raise
            _release_memory()
            tried.append((size, False))
            bad = size
        else:
            tried.append((size, True))
            good = size
            if not more:
                break
        if bad is None:
            size *= 2
        elif mode == "power" or bad - good <= 1:
            break
        else:
            size = (good + bad) // 2
    return good, tried
