"""Samplers that make a resumed run see exactly the data an uninterrupted run would.

:class:`ResumableSampler` replaces ``RandomSampler``, ``SequentialSampler`` and ``DistributedSampler`` in the
dataloaders the Trainer is given. It draws randomness exactly as those samplers do (so a Trainer run equals a plain
PyTorch loop over the same DataLoader), records the seed of each epoch's permutation, and can start an epoch at an
offset without loading the skipped samples.

With worker processes, :class:`SeededBatchSampler` and :class:`SeededDataset` reseed ``random``, ``numpy`` and
``torch`` before each batch from a seed that depends only on the epoch and the batch's position. What a worker does
to batch *k* then no longer depends on which worker got it or on what that worker did before, which is what makes
a run resumed mid-epoch with ``num_workers > 0`` bitwise equal to the uninterrupted one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sized
from typing import Any, TypeVar

import torch
from torch.utils.data import BatchSampler, Dataset, Sampler

__all__ = ["ResumableSampler", "SeededBatch", "SeededBatchSampler", "SeededDataset", "ends_with_repeat", "mix_seed",
           "repeats", "shard", "shard_size", "shuffle_generator"]

_MASK64 = (1 << 64) - 1
_T = TypeVar("_T")


def mix_seed(*values: int) -> int:
    """Combine integers into a well-spread 63-bit seed (splitmix64 steps)."""
    state = 0x9E3779B97F4A7C15
    for v in values:
        state = (state ^ (v & _MASK64)) & _MASK64
        state = (state + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        state = z ^ (z >> 31)
    return state & ((1 << 63) - 1)


def shard_size(n: int, num_replicas: int, rank: int, *, drop_last: bool = False, pad: bool = True) -> int:
    """How many of ``n`` items rank ``rank`` gets: ``DistributedSampler``'s rule (equal shares, padded, or cut with
    ``drop_last``); ``pad=False``: every ``num_replicas``-th item, shares differing by one at most."""
    if drop_last and n % num_replicas:
        return n // num_replicas
    if not pad:
        return len(range(rank, n, num_replicas))
    return math.ceil(n / num_replicas)


def ends_with_repeat(n: int, num_replicas: int, rank: int, *, drop_last: bool = False, pad: bool = True) -> bool:
    """Whether the last item of rank ``rank``'s :func:`shard` repeats one that another rank has: position ``j`` of
    the share is item ``rank + j * num_replicas`` of the padded list, and only the last position can lie past ``n``.
    What lets a gather of evaluation outputs drop the samples counted twice."""
    if not pad or (drop_last and n % num_replicas) or n == 0:
        return False
    return rank + (math.ceil(n / num_replicas) - 1) * num_replicas >= n


def repeats(n: int, num_replicas: int, *, drop_last: bool = False, pad: bool = True) -> int:
    """How many of ``n`` items the ranks' :func:`shard` shares repeat, all ranks together."""
    if not pad or (drop_last and n % num_replicas):
        return 0
    return shard_size(n, num_replicas, 0) * num_replicas - n


def shard(items: list[_T], num_replicas: int, rank: int, *, drop_last: bool = False, pad: bool = True) -> list[_T]:
    """Rank ``rank``'s share of ``items`` (every ``num_replicas``-th from ``rank``), sized by :func:`shard_size`;
    padding repeats items from the start, as ``DistributedSampler`` does."""
    if not pad and not drop_last:
        return items[rank::num_replicas]
    total = shard_size(len(items), num_replicas, rank, drop_last=drop_last) * num_replicas
    if items and total > len(items):
        items = items + (items * math.ceil((total - len(items)) / len(items)))[:total - len(items)]
    return items[rank:total:num_replicas]


class ResumableSampler(Sampler[int]):
    """Sequential, shuffled or distributed sampling that can resume at a sample offset.

    Args:
        data_source: The dataset (only its length is used).
        shuffle: Permute the indices each epoch.
        generator: For non-distributed shuffling, the generator the seed is drawn from (``None``: the global one,
            as ``RandomSampler`` does).
        num_replicas: The number of ranks to shard over (``None``: no sharding).
        rank: This rank's shard.
        seed: For distributed shuffling, the base seed (``DistributedSampler``'s ``seed + epoch``).
        drop_last: For distributed sampling, drop the tail instead of padding (``DistributedSampler``'s meaning).
        pad: For distributed sampling without ``drop_last``, repeat samples from the start so that every rank gets
            as many (``False``: no sample twice, the ranks' shares may differ by one; ``predict``'s sharding, as
            Lightning's).
    """

    def __init__(self, data_source: Sized, *, shuffle: bool, generator: torch.Generator | None = None,
                 num_replicas: int | None = None, rank: int = 0, seed: int = 0, drop_last: bool = False,
                 pad: bool = True) -> None:
        self._n = len(data_source)
        self.pad = pad
        self.shuffle = shuffle
        self.generator = generator
        self.num_replicas = num_replicas
        self.rank = rank
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self.epoch_seed: int | None = None
        self._resume_offset: int | None = None
        self._resume_seed: int | None = None
        self._resume_generator: torch.Tensor | None = None

    @property
    def draws_from_generator(self) -> bool:
        """Whether each epoch's seed is drawn from the user's own generator (``DataLoader(generator=g)``).

        The global generators travel in the checkpoint's ``rng`` entry; a user's generator does not, so its state
        goes into :meth:`state_dict` (else a resumed run would draw its next epochs' seeds from a fresh generator).
        """
        return self.generator is not None and self.shuffle and self.num_replicas is None

    def __len__(self) -> int:
        if self.num_replicas is None:
            return self._n
        return shard_size(self._n, self.num_replicas, self.rank, drop_last=self.drop_last, pad=self.pad)

    def ends_with_repeat(self) -> bool:
        """Whether this rank's last sample of an epoch repeats another rank's (the padding of an uneven split)."""
        return self.num_replicas is not None and ends_with_repeat(self._n, self.num_replicas, self.rank,
                                                                  drop_last=self.drop_last, pad=self.pad)

    def padding(self) -> tuple[int, int]:
        """The samples all ranks repeat together each epoch, and the samples there are."""
        if self.num_replicas is None:
            return 0, self._n
        return repeats(self._n, self.num_replicas, drop_last=self.drop_last, pad=self.pad), self._n

    def set_epoch(self, epoch: int) -> None:
        """Select the permutation of ``epoch`` (the Trainer calls this at the start of every epoch)."""
        self.epoch = epoch

    def resume(self, *, epoch_seed: int | None, offset: int) -> None:
        """Make the next iteration repeat the epoch whose seed was ``epoch_seed``, skipping ``offset`` samples.

        The user's generator (already set to its saved state, which follows this epoch's draws) is snapshotted here
        and put back when the iteration starts: ``iter(loader)`` draws the DataLoader's base seed from it in between,
        a draw the uninterrupted run made before the checkpoint, so without this the resumed run would be one draw
        ahead from the next epoch on.
        """
        self._resume_seed = epoch_seed
        self._resume_offset = offset
        self._resume_generator = self.generator.get_state() if self.draws_from_generator else None  # type: ignore[union-attr]

    def state_dict(self) -> dict[str, Any]:
        """The epoch, its seed and, when the seeds come from the user's generator, that generator's state."""
        state: dict[str, Any] = {"epoch": self.epoch, "epoch_seed": self.epoch_seed}
        if self.draws_from_generator:
            state["generator_state"] = self.generator.get_state()  # type: ignore[union-attr]
        return state

    def _indices(self) -> list[int]:
        if self.num_replicas is None:
            if not self.shuffle:
                return list(range(self._n))
            g = torch.Generator()
            g.manual_seed(self.epoch_seed if self.epoch_seed is not None else 0)
            return torch.randperm(self._n, generator=g).tolist()
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            indices = torch.randperm(self._n, generator=g).tolist()
        else:
            indices = list(range(self._n))
        return shard(indices, self.num_replicas, self.rank, drop_last=self.drop_last, pad=self.pad)

    def __iter__(self) -> Iterator[int]:
        offset = 0
        if self._resume_offset is not None:
            offset, self.epoch_seed = self._resume_offset, self._resume_seed
            self._resume_offset = self._resume_seed = None
            if self._resume_generator is not None:
                self.generator.set_state(self._resume_generator)  # type: ignore[union-attr]
                self._resume_generator = None
        elif self.num_replicas is None and self.shuffle:
            # The draw RandomSampler makes, from the same generator, so runs match a plain PyTorch loop.
            self.epoch_seed = int(torch.empty((), dtype=torch.int64).random_(generator=self.generator).item())
        else:
            self.epoch_seed = mix_seed(self.seed, self.epoch, torch.initial_seed())
        yield from self._indices()[offset:]


def shuffle_generator(loader: Any) -> torch.Generator | None:
    """The user's generator that a :class:`ResumableSampler` built for ``loader`` draws its epochs' seeds from.

    ``DataLoader(shuffle=True, generator=g)`` hands ``g`` to its ``RandomSampler``; ``prepare_dataloader`` passes
    that sampler's generator on (the rebuilt sampler shares it). The restore plan checks a saved state against it.
    """
    from torch.utils.data import DataLoader, RandomSampler

    sampler = loader.sampler if isinstance(loader, DataLoader) else None
    if type(sampler) is RandomSampler and isinstance(sampler.generator, torch.Generator):
        return sampler.generator
    return None


class SeededBatch(list[int]):
    """The indices of one batch, with the seed its worker uses for any randomness while loading it."""

    seed: int = 0


class SeededBatchSampler(BatchSampler):
    """A ``BatchSampler`` whose batches carry a seed derived from the epoch's seed, the rank and the batch index."""

    def __init__(self, sampler: ResumableSampler, batch_size: int, drop_last: bool) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.resumable = sampler
        self.first_batch = 0

    def __iter__(self) -> Iterator[list[int]]:
        index = self.first_batch
        self.first_batch = 0
        for indices in super().__iter__():
            batch = SeededBatch(indices)
            batch.seed = mix_seed(self.resumable.epoch_seed or 0, self.resumable.rank, index)
            index += 1
            yield batch


class SeededDataset(Dataset[Any]):
    """Wraps a map-style dataset so each batch is loaded right after reseeding from its :class:`SeededBatch`."""

    def __init__(self, dataset: Dataset[Any]) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: list[int]) -> list[Any]:
        if isinstance(indices, SeededBatch):
            random.seed(indices.seed)
            torch.manual_seed(indices.seed)
            try:
                import numpy as np

                np.random.seed(indices.seed % (2**32))
            except ImportError:  # pragma: no cover - numpy is optional
                pass
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is not None:
            return getitems(list(indices))  # type: ignore[no-any-return]
        return [self.dataset[i] for i in indices]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["dataset"], name)
