"""Iterating several dataloaders as one, in the four modes of Lightning's ``CombinedLoader``.

``fit`` given a list or dict of training dataloaders combines them in ``"max_size_cycle"`` mode, as Lightning does:
each batch holds one batch of every loader, a shorter loader starts again when it runs out, and the epoch is as long
as the longest. The functions here know nothing of the Trainer; :class:`TrainBatches` is what its fit loop iterates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal

from xtrain.core.errors import ConfigError

__all__ = ["MODES", "Mode", "TrainBatches", "check_mode", "combined_length", "flatten", "iterate"]

Mode = Literal["min_size", "max_size_cycle", "max_size", "sequential"]
MODES: tuple[Mode, ...] = ("min_size", "max_size_cycle", "max_size", "sequential")
_END = object()


def check_mode(mode: str) -> Mode:
    """``mode`` if it is one of :data:`MODES`.

    Raises:
        ConfigError: Naming the valid modes.
    """
    if mode not in MODES:
        raise ConfigError("mode", mode, "is not a CombinedLoader mode.", choices=list(MODES),
                          fix='write mode="max_size_cycle" (cycle the shorter loaders) or another of the choices.')
    return mode


def flatten(iterables: Any) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    """The loaders in ``iterables`` (a dict, list, tuple or one iterable), and how to put one value per loader back
    into that shape (a dict keeps its keys, so ``training_step`` gets ``batch["a"]``)."""
    if isinstance(iterables, Mapping):
        keys = list(iterables)
        return [iterables[k] for k in keys], lambda values: dict(zip(keys, values, strict=True))
    if isinstance(iterables, tuple):
        return list(iterables), tuple
    if isinstance(iterables, list):
        return list(iterables), list
    return [iterables], lambda values: values[0]


def combined_length(lengths: list[int | float], mode: Mode) -> int | float:
    """The combined batch count from each loader's (``inf`` for one without length)."""
    if not lengths:
        return 0
    if mode == "min_size":
        return min(lengths)
    if mode == "sequential":
        return sum(lengths)
    return max(lengths)


def iterate(loaders: list[Iterable[Any]], mode: Mode) -> Iterator[tuple[list[Any] | Any, int, int]]:
    """``(batch, batch_idx, dataloader_idx)`` as Lightning's ``CombinedLoader`` yields them: in ``"sequential"``
    mode one loader's batch at a time, otherwise a list of one batch per loader (``None`` for an exhausted one in
    ``"max_size"``) with ``dataloader_idx`` 0."""
    if mode == "sequential":
        for index, loader in enumerate(loaders):
            for batch_idx, batch in enumerate(loader):
                yield batch, batch_idx, index
        return
    if not loaders:
        return
    iterators = [iter(loader) for loader in loaders]
    consumed = [False] * len(loaders)
    batch_idx = 0
    while True:
        out: list[Any] = []
        for i, iterator in enumerate(iterators):
            value = next(iterator, _END)
            if value is _END:
                consumed[i] = True
                if mode == "min_size" or (mode == "max_size_cycle" and all(consumed)):
                    return
                if mode == "max_size_cycle":
                    iterators[i] = iter(loaders[i])
                    value = next(iterators[i], _END)
                    if value is _END:
                        return
                else:
                    value = None
            out.append(value)
        if mode == "max_size" and all(consumed):
            return
        yield out, batch_idx, 0
        batch_idx += 1


class TrainBatches:
    """The combined training batches the fit loop iterates: the batch alone (in the shape the loaders were given),
    and the epoch's length after ``limit_train_batches`` (Lightning limits each loader, then combines the lengths).

    Args:
        loaders: The prepared (sampler-replaced) loaders, flat.
        mode: How to combine them (not ``"sequential"``, which fit refuses as Lightning does).
        shape: Puts one batch per loader back into the shape they were given in.
        length: The epoch's batch count (``inf`` when a loader has no length).
    """

    def __init__(self, loaders: list[Any], *, mode: Mode, shape: Callable[[list[Any]], Any],
                 length: int | float) -> None:
        self.loaders = loaders
        self.mode = mode
        self.shape = shape
        self.length = length

    def __iter__(self) -> Iterator[Any]:
        shape = self.shape
        return (shape(batch) for batch, _, _ in iterate(self.loaders, self.mode))

    def __len__(self) -> int:
        if isinstance(self.length, float):
            raise TypeError("a training dataloader has no length")
        return self.length
