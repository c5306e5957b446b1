"""Preparing the user's dataloaders: resumable and distributed samplers, seeded workers, batch limits."""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Iterable, Sized
from typing import Any

from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)

from xtrain.core._internal.sampler import ResumableSampler, SeededBatchSampler, SeededDataset
from xtrain.core.errors import ConfigError

__all__ = ["batch_limit", "copy_dataloader", "prepare_dataloader", "resumable_sampler"]


def copy_dataloader(loader: DataLoader[Any], **attrs: Any) -> DataLoader[Any]:
    # DataLoader forbids setting these after __init__; a shallow copy keeps every other setting (and subclasses).
    new = copy.copy(loader)
    for name, value in attrs.items():
        object.__setattr__(new, name, value)
    object.__setattr__(new, "_iterator", None)
    return new


def prepare_dataloader(loader: Any, *, distributed: dict[str, int] | None, use_distributed_sampler: bool,
                       training: bool) -> Any:
    """Return ``loader`` with its sampler replaced by a :class:`ResumableSampler` where that is possible.

    Samplers we do not know (custom ones) are left alone; under a distributed strategy that means every rank sees
    all the data, which we warn about.
    """
    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return loader
    batch_sampler = loader.batch_sampler
    if batch_sampler is None or type(batch_sampler) is not BatchSampler:
        if distributed is not None and use_distributed_sampler:
            warnings.warn("a dataloader with a custom batch_sampler is used as is: every rank sees all its batches. "
                          "Shard the data yourself or use a plain sampler.", UserWarning, stacklevel=3)
        return loader
    sampler = batch_sampler.sampler
    shard = distributed if use_distributed_sampler else None
    kwargs: dict[str, Any]
    if isinstance(sampler, RandomSampler):
        if sampler.replacement or sampler._num_samples is not None:
            return loader
        kwargs = {"shuffle": True, "generator": sampler.generator}
    elif isinstance(sampler, SequentialSampler):
        kwargs = {"shuffle": False}
    elif isinstance(sampler, DistributedSampler):
        kwargs = {"shuffle": sampler.shuffle, "seed": sampler.seed, "drop_last": sampler.drop_last}
        shard = {"num_replicas": sampler.num_replicas, "rank": sampler.rank}
    else:
        if shard is not None:
            warnings.warn(f"the sampler {type(sampler).__name__} is used as is: every rank sees all of its samples. "
                          f"Shard the data yourself or use a plain sampler.", UserWarning, stacklevel=3)
        return loader
    if shard is not None:
        kwargs.update(shard)
    new_sampler = ResumableSampler(loader.dataset, **kwargs)  # type: ignore[arg-type]
    if training and loader.num_workers > 0:
        seeded = SeededBatchSampler(new_sampler, batch_sampler.batch_size, batch_sampler.drop_last)
        return copy_dataloader(loader, sampler=new_sampler, batch_sampler=seeded, dataset=SeededDataset(loader.dataset))
    return copy_dataloader(loader, sampler=new_sampler,
                 batch_sampler=BatchSampler(new_sampler, batch_sampler.batch_size, batch_sampler.drop_last))


def resumable_sampler(loader: Any) -> ResumableSampler | None:
    """The :class:`ResumableSampler` inside a prepared loader, if any."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    sampler = getattr(batch_sampler, "sampler", None)
    return sampler if isinstance(sampler, ResumableSampler) else None


def batch_limit(loader: Iterable[Any], limit: int | float, argument: str) -> int | float:
    """How many batches to take from ``loader``: an int limit as is, a fraction of its length, ``inf`` if unsized."""
    length = len(loader) if isinstance(loader, Sized) else math.inf
    if isinstance(limit, int):
        return min(limit, length)
    if length == math.inf:
        if limit == 1.0:
            return math.inf
        raise ConfigError(argument, limit, "is a fraction, but the dataloader has no length.",
                          fix=f"pass an int number of batches to {argument}.")
    return int(length * limit)
