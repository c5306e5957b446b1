"""Preparing the user's dataloaders: resumable and distributed samplers, seeded workers, batch limits."""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sized
from typing import Any

from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)

from xtrain.core._internal.combined import MODES, TrainBatches, combined_length, flatten
from xtrain.core._internal.sampler import ResumableSampler, SeededBatchSampler, SeededDataset
from xtrain.core.errors import ConfigError
from xtrain.core.seed import exported_seed

__all__ = ["LoaderShape", "batch_limit", "check_loader", "check_train_batches", "combined_train", "copy_dataloader",
           "eval_loaders", "inner_loaders", "length", "prepare_dataloader", "resumable_sampler", "set_sampler_epoch",
           "shut_down_workers", "warn_empty_eval"]


_REPLACEABLE = (RandomSampler, SequentialSampler, DistributedSampler)


def copy_dataloader(loader: DataLoader[Any], **attrs: Any) -> DataLoader[Any]:
    # DataLoader forbids setting these after __init__; a shallow copy keeps every other setting (and subclasses).
    new = copy.copy(loader)
    for name, value in attrs.items():
        object.__setattr__(new, name, value)
    object.__setattr__(new, "_iterator", None)
    return new


def prepare_dataloader(loader: Any, *, distributed: dict[str, int] | None, use_distributed_sampler: bool,
                       training: bool, pad: bool = True) -> Any:
    """Return ``loader`` with its sampler replaced by a :class:`ResumableSampler` where that is possible.

    Samplers we do not know (custom ones) are left alone, except under a distributed strategy, where each rank gets
    its share of what they yield (:class:`~xtrain.core._internal.sharded_sampler.ShardedSampler`), and of a custom
    batch sampler's batches (``ShardedBatchSampler``). ``pad=False`` (``predict``): the strategy's sharding repeats
    no sample to even the ranks out, so no prediction is made twice.
    """
    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return loader
    batch_sampler = loader.batch_sampler
    if batch_sampler is None or type(batch_sampler) is not BatchSampler:
        if distributed is not None and use_distributed_sampler:
            return _split_batch_sampler(loader, batch_sampler, distributed)
        return loader
    sampler = batch_sampler.sampler
    shard = distributed if use_distributed_sampler else None
    kwargs: dict[str, Any]
    torchs = type(sampler) in _REPLACEABLE  # a subclass may order its samples otherwise: it is the user's own
    if torchs and isinstance(sampler, RandomSampler):
        if sampler.replacement or sampler._num_samples is not None:
            return loader
        kwargs = {"shuffle": True, "generator": sampler.generator, "seed": exported_seed(), "pad": pad}
        if shard is not None and sampler.generator is not None:
            _warn_generator_unused()
    elif torchs and isinstance(sampler, SequentialSampler):
        kwargs = {"shuffle": False, "pad": pad}
    elif torchs and isinstance(sampler, DistributedSampler):
        kwargs = {"shuffle": sampler.shuffle, "seed": sampler.seed, "drop_last": sampler.drop_last}
        shard = {"num_replicas": sampler.num_replicas, "rank": sampler.rank}
    elif isinstance(sampler, DistributedSampler):  # the user's own sharding
        return loader
    else:
        if shard is None:
            return loader
        if not isinstance(sampler, Sized):  # no length to split evenly: as it is, said once
            warnings.warn(f"the sampler {type(sampler).__name__} has no length, so it is used as is: every rank sees "
                          f"all of its samples. Shard the data yourself or give the sampler a __len__.", UserWarning,
                          stacklevel=3)
            return loader
        from xtrain.core._internal.sharded_sampler import ShardedSampler

        split = ShardedSampler(sampler, num_replicas=shard["num_replicas"], rank=shard["rank"], pad=pad)
        return copy_dataloader(loader, sampler=split,
                               batch_sampler=BatchSampler(split, batch_sampler.batch_size, batch_sampler.drop_last))
    if shard is not None:
        kwargs.update(shard)
    new_sampler = ResumableSampler(loader.dataset, **kwargs)  # type: ignore[arg-type]
    if training and loader.num_workers > 0:
        seeded = SeededBatchSampler(new_sampler, batch_sampler.batch_size, batch_sampler.drop_last)
        return copy_dataloader(loader, sampler=new_sampler, batch_sampler=seeded, dataset=SeededDataset(loader.dataset))
    return copy_dataloader(loader, sampler=new_sampler,
                 batch_sampler=BatchSampler(new_sampler, batch_sampler.batch_size, batch_sampler.drop_last))


def _warn_generator_unused() -> None:
    from xtrain.core.rank_zero import rank_zero_warn

    rank_zero_warn("DataLoader(generator=...) does not choose the shuffle order under a distributed strategy: every "
                   "rank must draw the same permutation, so it comes from the seed of seed_everything (as "
                   "Lightning's DistributedSampler's does; torch.manual_seed does not change it either). Fix: call "
                   "seed_everything(seed) (engine.seed_everything(seed)) to choose the order.", stacklevel=5)


def _split_batch_sampler(loader: DataLoader[Any], batch_sampler: Iterable[Any] | None,
                         distributed: dict[str, int]) -> Any:
    """A custom batch sampler under a distributed strategy: each rank gets its share of the batches (without one,
    ``batch_size=None``: of the samples). One over a ``DistributedSampler`` (the user sharded already) stays as it is;
    one without a length cannot be split evenly, so it stays as it is, with a warning."""
    from xtrain.core._internal.sharded_sampler import ShardedBatchSampler, ShardedSampler

    source = loader.sampler if batch_sampler is None else batch_sampler
    if isinstance(getattr(source, "sampler", source), DistributedSampler):
        return loader
    if not isinstance(source, Sized):
        warnings.warn(f"the {'sampler' if batch_sampler is None else 'batch sampler'} {type(source).__name__} has no "
                      f"length, so it is used as is: every rank sees all of it. Shard the data yourself or give it a "
                      f"__len__.", UserWarning, stacklevel=4)
        return loader
    replicas, rank = distributed["num_replicas"], distributed["rank"]
    if batch_sampler is None:
        return copy_dataloader(loader, sampler=ShardedSampler(loader.sampler, num_replicas=replicas, rank=rank))
    return copy_dataloader(loader, batch_sampler=ShardedBatchSampler(batch_sampler, num_replicas=replicas, rank=rank))


def shut_down_workers(loaders: Iterable[Any]) -> None:
    """Stop the worker processes that ``persistent_workers=True`` keeps between epochs, at the end of a stage (as
    Lightning does): they outlived ``fit`` (two more processes after each call), and a worker forked later inherited
    the live iterator and complained when it was collected there ("can only test a child process")."""
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    for loader in _inner(loaders):
        iterator = getattr(loader, "_iterator", None)
        if isinstance(iterator, _MultiProcessingDataLoaderIter):
            iterator._shutdown_workers()
            loader._iterator = None


def set_sampler_epoch(loader: Any, epoch: int) -> None:
    """Call ``set_epoch(epoch)`` on a dataloader's ``sampler``, ``batch_sampler`` and that one's ``sampler``, where
    they have one. Lightning does so every epoch, and a user's distributed-aware sampler reshuffles by it (without,
    every epoch repeated the first one's order)."""
    from xtrain.core._internal.sharded_sampler import tell_epoch

    if isinstance(loader, TrainBatches):
        for inner in loader.loaders:
            set_sampler_epoch(inner, epoch)
        return
    batch_sampler = getattr(loader, "batch_sampler", None)
    tell_epoch(epoch, getattr(loader, "sampler", None), batch_sampler, getattr(batch_sampler, "sampler", None))


def combined_train(given: Any, prepare: Callable[[Any], Any], limit: int | float, *,
                   argument: str = "limit_train_batches") -> TrainBatches | None:
    """Several training loaders (a list, tuple or dict, or a ``CombinedLoader``) as the batches fit iterates;
    ``None`` for one loader. As Lightning: a plain container is combined in ``"max_size_cycle"`` mode, each loader is
    prepared (``prepare``: its sampler made resumable and sharded) and limited by ``limit_train_batches`` on its own,
    and the epoch's length combines the limited lengths. ``argument`` names the limit in messages (``overfit_batches``
    when that set it); an empty loader is named by its index or key, as the user cannot tell which one it is.

    Raises:
        ConfigError: For ``CombinedLoader(mode="sequential")``, an empty container, or a loader with no batch.
    """
    from xtrain.core.combined_loader import CombinedLoader

    if isinstance(given, CombinedLoader):
        iterables, mode = given.iterables, given.mode
    elif isinstance(given, (list, tuple, Mapping)):
        iterables, mode = given, "max_size_cycle"
    else:
        return None
    if mode == "sequential":
        raise ConfigError("train_dataloaders", 'CombinedLoader(mode="sequential")', "fit cannot train on the loaders "
                          "one after the other (Lightning refuses it too).", choices=[m for m in MODES if m != mode],
                          fix='use mode="max_size_cycle" (the default for a list or dict of training loaders).')
    flat, shape = flatten(iterables)
    if not flat:
        raise ConfigError("train_dataloaders", given, "holds no dataloader, so fit would train on nothing.",
                          fix="pass at least one DataLoader.")
    loaders = [prepare(loader) for loader in flat]
    keys = list(iterables) if isinstance(iterables, Mapping) else range(len(flat))
    for key, loader in zip(keys, loaders, strict=True):
        check_train_batches(loader, argument=f"train_dataloaders[{key!r}]" if isinstance(
            iterables, (list, tuple, Mapping)) else "train_dataloaders")
    limits = [batch_limit(loader, limit, argument) for loader in loaders]
    return TrainBatches(loaders, mode=mode, shape=shape, length=combined_length(limits, mode))


_EVAL_MODES = {"validate": MODES, "test": MODES, "predict": ("sequential",)}


def eval_loaders(given: Any, prepare: Callable[[Any], Any], *, stage: str, argument: str) -> list[Any]:
    """The evaluation loaders the loops run one after the other (``dataloader_idx`` is the position), as Lightning
    reads what ``val_dataloader()`` and its siblings return: a list, a tuple or a dict's values (in order) are
    several; ``CombinedLoader(mode="sequential")`` is its loaders; another mode (not for ``predict``) is one loader
    whose batches combine one of each.

    Raises:
        ConfigError: For ``predict`` with a ``CombinedLoader`` not in ``"sequential"`` mode, as Lightning refuses it.
    """
    from xtrain.core.combined_loader import CombinedLoader

    if given is None:
        return []
    if isinstance(given, CombinedLoader):
        allowed = _EVAL_MODES["validate" if stage == "fit" else stage]
        if given.mode not in allowed:
            raise ConfigError(argument, f"CombinedLoader(mode={given.mode!r})", f"{stage} runs the loaders one after "
                              "the other only (Lightning refuses this mode too).", choices=list(allowed),
                              fix='use mode="sequential".')
        flat, shape = flatten(given.iterables)
        loaders = [prepare(loader) for loader in flat]
        if given.mode == "sequential":
            return loaders
        lengths = [length(loader) for loader in loaders]
        total = combined_length([math.inf if n is None else n for n in lengths], given.mode)
        return [TrainBatches(loaders, mode=given.mode, shape=shape, length=total)]
    if isinstance(given, Mapping):
        return [prepare(loader) for loader in given.values()]
    if isinstance(given, (list, tuple)):
        return [prepare(loader) for loader in given]
    return [prepare(given)]


def check_loader(loader: Any, argument: str) -> None:
    """Refuse what cannot give batches before the run starts (``iter`` would fail inside the loop, naming nothing).

    Raises:
        ConfigError: For an object that is not iterable; a function is told to be called (the commonest slip).
    """
    if isinstance(loader, Iterable) or hasattr(loader, "__getitem__"):
        return
    called = f" ({getattr(loader, '__name__', 'it')}() returns one)" if callable(loader) else ""
    raise ConfigError(argument, loader, f"is not a DataLoader or another iterable of batches{called}.",
                      fix=f"pass the dataloader itself{': call the function' if callable(loader) else ''}, e.g. "
                          f"{argument}=DataLoader(dataset, batch_size=32).")


def inner_loaders(loader: Any) -> list[Any]:
    """The dataloaders inside what the fit loop iterates: one, or each of combined ones."""
    return list(loader.loaders) if isinstance(loader, TrainBatches) else [loader]


def _inner(loaders: Iterable[Any]) -> list[Any]:
    return [inner for loader in loaders for inner in inner_loaders(loader)]


def resumable_sampler(loader: Any) -> ResumableSampler | None:
    """The :class:`ResumableSampler` inside a prepared loader, if any."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    sampler = getattr(batch_sampler, "sampler", None)
    return sampler if isinstance(sampler, ResumableSampler) else None


def length(obj: Any) -> int | None:
    """``len(obj)``, or None when it has none: a DataLoader always defines ``__len__``, but over an
    ``IterableDataset`` without one (a stream) it raises ``TypeError``."""
    if not isinstance(obj, Sized):
        return None
    try:
        return len(obj)
    except (TypeError, NotImplementedError):
        return None


def batch_limit(loader: Iterable[Any], limit: int | float, argument: str) -> int | float:
    """How many batches to take from ``loader``: an int limit as is, a fraction of its length, ``inf`` if unsized.

    ``argument`` is the setting the user wrote (``overfit_batches`` sets the limits), so a message names what to change.
    """
    size = length(loader)
    if isinstance(limit, int):
        return limit if size is None else min(limit, size)
    if size is None:
        if limit == 1.0:
            return math.inf
        raise ConfigError(argument, limit, "is a fraction, but the dataloader has no length.",
                          fix=f"pass an int number of batches to {argument}.")
    batches = int(size * limit)
    if batches == 0 and limit > 0 and size > 0:
        raise ConfigError(argument, limit, f"of a dataloader of {size} batches is 0 batches, so that loop would "
                          f"silently do nothing.", fix=f"write {argument}={1 / size:.3g} or more (1 batch), an int "
                          f"number of batches, or 0 to " + ("turn it off." if argument == "overfit_batches" else
                                                            "skip it on purpose."))
    return batches


def _shape(loader: Any) -> dict[str, Any]:
    """What makes a dataloader's length: its sample count (on this rank), batch size and ``drop_last``."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    sampler = getattr(batch_sampler, "sampler", None)
    dataset = getattr(loader, "dataset", None)
    return {"len": length(loader), "samples": length(dataset), "rank_samples": length(sampler),
            "batch_size": getattr(batch_sampler, "batch_size", getattr(loader, "batch_size", None)),
            "drop_last": getattr(batch_sampler, "drop_last", getattr(loader, "drop_last", None)),
            "ranks": getattr(sampler, "num_replicas", None) or 1, "rank": getattr(sampler, "rank", 0)}


class LoaderShape:
    """A dataloader shown in a message by what makes its length, not by a dict the user never wrote (nor by
    ``DataLoader``'s address-only repr)."""

    __slots__ = ("text",)
    text: str

    def __init__(self, loader: Any) -> None:
        if isinstance(loader, TrainBatches):
            self.text = f"<{len(loader.loaders)} combined: {', '.join(LoaderShape(x).text for x in loader.loaders)}>"
            return
        shape, dataset = _shape(loader), getattr(loader, "dataset", None)
        over = f" over {type(dataset).__name__}" if dataset is not None else ""
        size = "no length" if shape["len"] is None else f"len={shape['len']}"
        self.text = (f"<{type(loader).__name__}{over}: {size}, batch_size={shape['batch_size']}, "
                     f"drop_last={shape['drop_last']}>")

    def __repr__(self) -> str:
        return self.text


def check_train_batches(loader: Any, *, argument: str = "train_dataloaders") -> None:
    """Refuse a training dataloader that yields no batch on this rank: the fit would "succeed" with zero steps.

    Args:
        loader: The prepared training dataloader.
        argument: How the message names it: ``train_dataloaders[1]`` or ``train_dataloaders['b']`` for one of
            several, so the user knows which of theirs is empty.

    Raises:
        ConfigError: Naming the loader's length, batch size and ``drop_last`` (and, when sharded over ranks, how
            many samples this rank gets).
    """
    if length(loader) != 0:
        return
    shape = _shape(loader)
    value = LoaderShape(loader)
    samples, per_rank, size = shape["samples"], shape["rank_samples"], shape["batch_size"]
    if samples == 0:
        raise ConfigError(argument, value, "the training dataset is empty (did a filter remove every "
                          "sample?), so fit would end at once without a step.",
                          fix="check how the dataset is built; it needs at least one sample.")
    sharded = ""
    if shape["ranks"] > 1 and per_rank is not None:
        sharded = (f" Split over {shape['ranks']} ranks, rank {shape['rank']} gets {per_rank} of the {samples} "
                   f"samples, so rank {shape['rank']} gets 0 batches.")
        samples = per_rank
    raise ConfigError(argument, value, f"yields no batch: {samples} sample(s) with batch_size={size} "
                      f"and drop_last={shape['drop_last']}.{sharded} fit would end at once without a step.",
                      fix=f"set drop_last=False, or a batch_size of at most {samples}, or use more data.")


def warn_empty_eval(loaders: list[Any], limits: list[float], stage: str) -> None:
    """Warn about evaluation dataloaders with no batch: that stage silently does nothing for them."""
    for i, (loader, limit) in enumerate(zip(loaders, limits, strict=True)):
        if limit == 0 and length(loader) == 0:
            shape = _shape(loader)
            warnings.warn(f"{stage} dataloader {i} has no batch (len 0: {shape['rank_samples']} sample(s) on this "
                          f"rank, batch_size={shape['batch_size']}, drop_last={shape['drop_last']}), so it is "
                          f"skipped. Set drop_last=False or a smaller batch_size, or check its dataset.",
                          UserWarning, stacklevel=3)
