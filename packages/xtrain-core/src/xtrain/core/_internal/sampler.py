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
        generator: For non-distributed shuffling, the generator that permutes (``None``: a fresh one seeded from
            the global generator), as ``RandomSampler``'s does.
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
        self._epoch_start: torch.Tensor | None = None  # the user's generator's state before this epoch's draws
        self._before_open: tuple[torch.Tensor, torch.Tensor | None] | None = None

    @property
    def draws_from_generator(self) -> bool:
        """Whether each epoch's order is drawn from the user's own generator (``DataLoader(generator=g)``).

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

        The user's generator (already set by :meth:`restore_generator`) is snapshotted here and put back when the
        iteration starts: ``iter(loader)`` draws the DataLoader's base seed from it in between, a draw the
        uninterrupted run made before the epoch's own draws, so without this the resumed run would be one draw
        ahead. A state of this version's form (the generator before the epoch's draws) replays those draws, so the
        permutation and the generator's state after it are the interrupted epoch's; one of the former form (the
        generator after them, the permutation from ``epoch_seed``) repeats that epoch as it was drawn then.
        """
        self._resume_seed = epoch_seed
        self._resume_offset = offset
        self._resume_generator = self.generator.get_state() if self.draws_from_generator else None  # type: ignore[union-attr]

    def restore_generator(self, state: torch.Tensor, *, epoch_seed: int | None, mid_epoch: bool) -> None:
        """Load a saved ``generator_state`` (from :meth:`state_dict`) into the user's generator.

        ``mid_epoch``: the run resumes inside the saved epoch (:meth:`resume` follows, which replays the epoch's
        draws); otherwise the saved epoch is over and its draws are replayed here, leaving the generator where
        the uninterrupted run's was after it. A state of the former form (saved after the draws) is loaded as is.
        """
        generator = self.generator
        if generator is None:
            return
        generator.set_state(state)
        if not mid_epoch and _is_epoch_start(state, epoch_seed, generator.device):
            self._draw_permutation(generator)

    def state_dict(self) -> dict[str, Any]:
        """The epoch, its seed and, when the order comes from the user's generator, that generator's state before
        the epoch's draws (the epoch's seed is then the first number that state draws, which marks this form)."""
        state: dict[str, Any] = {"epoch": self.epoch, "epoch_seed": self.epoch_seed}
        if self.draws_from_generator:
            start = self._epoch_start
            state["generator_state"] = start.clone() if start is not None else self.generator.get_state()  # type: ignore[union-attr]
        return state

    def expect_fresh_iterator(self) -> None:
        """The next ``iter(loader)`` starts worker processes where the uninterrupted run reused its persistent ones
        (the first epoch after a restore at an epoch's end). Opening them draws the workers' base seed, from the
        global generator or the loader's own, a draw that run did not make there: this epoch's draws start from the
        states before it, so the order and the random state after it are the uninterrupted run's. (Workers are
        reseeded at every batch: their base seed does not reach the data.)"""
        own = self.generator.get_state() if self.generator is not None else None
        self._before_open = (torch.get_rng_state(), own)

    def draw_as_opened(self, *, to_end: bool) -> None:
        """The draws ``RandomSampler`` makes when an iterator that is then thrown away starts it, without starting an
        epoch here: its seed from the global generator, or with the user's generator the permutation (and, run
        ``to_end``, the empty tail it draws at its end). A no-op for sequential and distributed sampling, which
        draw nothing. (Lightning's reload opens such an iterator; with workers it prefetches, which starts us.)"""
        if self.draws_from_generator:
            assert self.generator is not None
            if to_end:
                self._draw_permutation(self.generator)
            else:
                torch.randperm(self._n, generator=self.generator)
        elif self.num_replicas is None and self.shuffle:
            torch.empty((), dtype=torch.int64).random_()

    def _draw_permutation(self, generator: torch.Generator) -> list[int]:
        """The draws ``RandomSampler.__iter__`` makes from its generator in an epoch of ``len(data_source)``
        samples: a permutation, then the empty tail ``randperm(n)[:0]`` it draws when run to its end (drawn here
        with the permutation, so the generator is where PyTorch's is after the epoch even when the loop stops at
        the last batch without asking for the next)."""
        indices = torch.randperm(self._n, generator=generator).tolist()
        torch.randperm(self._n, generator=generator)
        return indices

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

    def _from_generator(self, generator: torch.Generator) -> list[int]:
        """This epoch's order, drawn from the user's generator as ``RandomSampler`` draws it."""
        self._epoch_start = generator.get_state()
        self.epoch_seed = _first_draw(self._epoch_start, generator.device)
        return self._draw_permutation(generator)

    def __iter__(self) -> Iterator[int]:
        if self._before_open is not None:
            global_state, own = self._before_open
            self._before_open = None
            torch.set_rng_state(global_state)
            if own is not None and self.generator is not None:
                self.generator.set_state(own)
        offset = 0
        generator = self.generator if self.draws_from_generator else None
        if self._resume_offset is not None:
            offset, self.epoch_seed = self._resume_offset, self._resume_seed
            snapshot, self._resume_generator = self._resume_generator, None
            self._resume_offset = self._resume_seed = None
            if generator is not None and snapshot is not None:
                generator.set_state(snapshot)
                if _is_epoch_start(snapshot, self.epoch_seed, generator.device):
                    yield from self._from_generator(generator)[offset:]
                    return
                self._epoch_start = None  # a checkpoint of the former form: this epoch as it was drawn then
        elif generator is not None:
            # RandomSampler(generator=g) permutes with g itself, so runs match a plain PyTorch loop.
            yield from self._from_generator(generator)
            return
        elif self.num_replicas is None and self.shuffle:
            # The draw RandomSampler makes from the global generator, so runs match a plain PyTorch loop.
            self.epoch_seed = int(torch.empty((), dtype=torch.int64).random_().item())
        else:
            self.epoch_seed = mix_seed(self.seed, self.epoch, torch.initial_seed())
        yield from self._indices()[offset:]


def _first_draw(state: torch.Tensor, device: torch.device) -> int:
    """The first int64 a generator in ``state`` draws (what the DataLoader's base-seed draw would take)."""
    scratch = torch.Generator(device=device)
    scratch.set_state(state)
    return int(torch.empty((), dtype=torch.int64, device=device).random_(generator=scratch).item())


def _is_epoch_start(state: torch.Tensor, epoch_seed: int | None, device: torch.device) -> bool:
    """Whether a saved ``(generator_state, epoch_seed)`` is of the current form: the generator's state before the
    epoch's draws, whose first number is the epoch's seed (in the former form the seed was drawn before the saved
    state, which draws another number but once in 2**63)."""
    return epoch_seed is not None and _first_draw(state, device) == epoch_seed


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
