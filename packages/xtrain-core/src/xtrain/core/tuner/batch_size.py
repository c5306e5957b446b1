"""Finding the largest batch size that fits in memory, by growing it until an out-of-memory error."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Literal

import torch

from xtrain.core.errors import ConfigError
from xtrain.core.rank_zero import rank_zero_info

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


class _Search:
    """Runs the trials and keeps their record; ``attempt`` says whether a size fit."""

    def __init__(self, trial: Callable[[int], int | None]) -> None:
        self.trial = trial
        self.tried: list[tuple[int, bool]] = []
        self.length: int | None = None

    def attempt(self, size: int) -> bool:
        try:
            self.length = self.trial(size)
        except Exception as exc:  # only out-of-memory errors are handled; the rest is re-raised
            if not is_out_of_memory(exc):
                raise
            _release_memory()
            self.tried.append((size, False))
            if size <= 1:
                raise ConfigError("batch_size", 1, "already runs out of memory: no batch size fits.",
                                  fix="free memory: a smaller model, a lower precision, or fewer activations kept "
                                      "(gradient checkpointing).") from exc
            return False
        self.tried.append((size, True))
        return True

    def holds_all(self, size: int) -> bool:
        if self.length is not None and size >= self.length:
            rank_zero_info(f"scale_batch_size: a batch of {size} already holds the whole dataset "
                           f"({self.length} samples); stopping.")
            return True
        return False


def find_batch_size(trial: Callable[[int], int | None], *, mode: Literal["power", "binsearch"], init_val: int,
                    max_trials: int, max_val: int = 8192, margin: float = 0.05) -> tuple[int, list[tuple[int, bool]]]:
    """Search the largest batch size that fits; returns it and every ``(size, fitted)`` tried.

    ``trial(size)`` trains a few steps at ``size`` and returns the dataset's length (``None`` when unknown), or
    raises the device's out-of-memory error. The search follows Lightning 2.6's, so a migrated script gets the size
    it got before:

    - ``power`` doubles from ``init_val``. The first size that does not fit ends the search at the last size that
      did; while none has fit yet, the size is halved and tried again. ``max_trials`` counts every trial.
    - ``binsearch`` doubles the same way, then bisects between the largest size that fit (1 before any did) and the
      smallest that did not, until they are adjacent; ``max_trials`` counts the trials that fit. ``margin`` is then
      taken off the result (``int(size * (1 - margin))``, at least 1), a safety buffer for memory that varies from
      batch to batch.

    Both stop once one batch holds the whole dataset, and never try a size above ``max_val`` (they try ``max_val``
    itself where Lightning stops just before it without trying it: the same result when it fits, and a size that
    fits where Lightning would return one that does not). Each decision is reported with ``rank_zero_info``, as
    Lightning logs its own.
    """
    search = _Search(trial)
    size = init_val
    if size > max_val:
        rank_zero_info(f"scale_batch_size: init_val={init_val} is above max_val={max_val}; starting at {max_val}.")
        size = max_val
    if mode == "power":
        size = _power(search, size, max_trials, max_val)
    else:
        size = _bisect(search, size, max_trials, max_val)
        reduced = max(1, int(size * (1 - margin)))
        if reduced != size:
            rank_zero_info(f"scale_batch_size: taking the margin of {margin:.1%} off {size}: {reduced}.")
            size = reduced
    rank_zero_info(f"scale_batch_size: the batch size is {size}.")
    return size, search.tried


def _grow(size: int, max_val: int) -> int | None:
    if size >= max_val:
        rank_zero_info(f"scale_batch_size: reached max_val={max_val}; stopping.")
        return None
    bigger = min(size * 2, max_val)
    rank_zero_info(f"scale_batch_size: batch size {size} fits; trying {bigger}.")
    return bigger


def _power(search: _Search, size: int, max_trials: int, max_val: int) -> int:
    last_fit: int | None = None
    for number in range(1, max_trials + 1):
        if not search.attempt(size):
            if last_fit is not None:
                rank_zero_info(f"scale_batch_size: batch size {size} ran out of memory; keeping {last_fit}.")
                return last_fit
            smaller = max(1, size // 2)
            rank_zero_info(f"scale_batch_size: batch size {size} ran out of memory; trying {smaller}.")
            size = smaller
            continue
        last_fit = size
        if number >= max_trials or search.holds_all(size):
            return size
        bigger = _grow(size, max_val)
        if bigger is None:
            return size
        size = bigger
    return size  # max_trials spent without any size fitting: Lightning's last halving, untried


def _bisect(search: _Search, size: int, max_trials: int, max_val: int) -> int:
    fit, failed, fits = 1, None, 0
    while True:
        if not search.attempt(size):
            failed = size
            size = (fit + failed) // 2
            if failed - fit <= 1:
                rank_zero_info(f"scale_batch_size: batch size {failed} ran out of memory; keeping {size}.")
                return size
            rank_zero_info(f"scale_batch_size: batch size {failed} ran out of memory; trying {size}.")
            continue
        fits += 1
        fit = size
        if fits >= max_trials or search.holds_all(size):
            return size
        if failed is None:
            bigger = _grow(size, max_val)
            if bigger is None:
                return size
            size = bigger
        elif failed - fit <= 1:
            return size
        else:
            size = (fit + failed) // 2
            rank_zero_info(f"scale_batch_size: batch size {fit} fits; trying {size}.")
