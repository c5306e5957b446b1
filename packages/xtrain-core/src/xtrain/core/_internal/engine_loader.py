"""The dataloader :meth:`Engine.setup_dataloaders` returns: batches on the device, an epoch per pass, a position.

Each pass tells the sampler its epoch, so a distributed shuffle differs from epoch to epoch. A new process starts
counting at 0 again, so the loader also has what Accelerate users reach for to resume: ``set_epoch`` (a user's own
``loader.sampler.set_epoch(e)`` is honoured too) and ``state_dict``/``load_state_dict``. Passed in the state of
``engine.save``/``engine.load``, the loader saves its epoch and the batches already taken from it, and the next pass
after a load repeats that epoch's order from the next batch on. torch's global generator is not part of that state
(``engine.save`` does not store it, as Fabric's does not); a user who saves and restores it gets later epochs and
random ops bitwise as uninterrupted, because the resumed pass does not draw from it again.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset

from xtrain.core._internal.data import resumable_sampler, set_sampler_epoch
from xtrain.core._internal.progress_signal import PROGRESS
from xtrain.core._internal.shard_padding import Layout, Repeat, sharding_of
from xtrain.core.rank_zero import rank_zero_warn
from xtrain.core.strategy import Strategy

__all__ = ["EngineLoader"]


class EngineLoader:
    """Iterates a prepared dataloader: moves batches to the device and advances the sampler's epoch on each pass."""

    def __init__(self, loader: Any, strategy: Strategy, *, move: bool, where: list[int],
                 on_pass_end: Callable[[], None], passes: list[EngineLoader]) -> None:
        self.loader = loader
        self._passes = passes  # the set-up loaders being iterated, innermost last
        self._strategy = strategy
        self._move = move
        self._where = where
        self._on_pass_end = on_pass_end
        self._epoch = 0  # the next pass's epoch
        self._told = 0  # the epoch this loader last gave the sampler (a different one there was set by the user)
        self._current = 0  # the epoch of the pass under way (or the last one)
        self._taken = 0  # batches taken in that pass
        self._finished = True
        self._resume: tuple[int | None, int] | None = None  # (epoch seed, batches to skip) for the next pass
        self._warned_stream = False

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch`` (its shuffle order under a distributed sampler)."""
        self._epoch = epoch

    def state_dict(self) -> dict[str, Any]:
        """The epoch and the batches taken from it (after a finished pass: the next epoch, none taken)."""
        sampler = resumable_sampler(self.loader)
        if self._finished:
            return {"epoch": self._epoch, "batches": 0, "epoch_seed": None}
        state: dict[str, Any] = {"epoch": self._current, "batches": self._taken,
                                 "epoch_seed": sampler.epoch_seed if sampler is not None else None}
        if sampler is not None and sampler.draws_from_generator:
            state["generator_state"] = sampler.state_dict()["generator_state"]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at ``state``'s epoch and batch: the next pass skips the batches the saved run had taken."""
        epoch, batches, seed = state["epoch"], state["batches"], state.get("epoch_seed")
        for key, value in (("epoch", epoch), ("batches", batches)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{key} must be a non-negative int, not {value!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"epoch_seed must be an int or None, not {seed!r}")
        sampler = resumable_sampler(self.loader)
        if "generator_state" in state and sampler is not None and sampler.draws_from_generator:
            sampler.restore_generator(state["generator_state"], epoch_seed=seed, mid_epoch=batches > 0)
        self._epoch = self._told = epoch
        if sampler is not None:
            sampler.set_epoch(epoch)
        self._resume = (seed, batches) if batches else None

    def share(self) -> tuple[Layout | None, Repeat]:
        """How this rank's current batch lines up with the other ranks', for gathering evaluation outputs.

        The layout is ``"samples"`` when the ranks take every ``world_size``-th sample (a batch's rows interleave
        with the other ranks' rows), ``"batches"`` when they take whole batches (or single items), ``None`` when
        xtrain did not shard the loader. The second value says what in the current batch repeats another rank's
        (the sampler adds repeats so that every rank runs as many batches): ``None`` nothing, ``"all"`` the whole
        batch, a number ``n`` the last sample of this batch of ``n`` samples (rows of another count are not
        per-sample outputs, and nothing of them is dropped).
        """
        found = sharding_of(self.loader)
        if found is None:
            return None, None
        layout, sharding = found
        if self._finished or self._taken != len(self.loader) or not sharding.ends_with_repeat():
            return layout, None
        if layout == "batches":
            return layout, "all"
        batch_size = self.loader.batch_sampler.batch_size
        if self.loader.batch_sampler.drop_last and len(sharding) % batch_size:
            return layout, None  # the share's last sample, the repeat, is in the batch that is dropped
        return layout, len(sharding) - (len(self.loader) - 1) * batch_size

    def warn_unsharded_stream(self) -> None:
        """Once per loader: the ranks' rows of an ``IterableDataset`` are the same samples unless it shards itself."""
        if self._warned_stream or not isinstance(getattr(self.loader, "dataset", None), IterableDataset):
            return
        self._warned_stream = True
        rank_zero_warn("gather_for_metrics over an IterableDataset: xtrain does not split a stream across ranks "
                       "(only a sampler can be split), so unless the dataset yields each rank its own share, every "
                       "rank's rows are the same samples and a metric counts each world_size times. Fix: shard it by "
                       "rank in __iter__ (torch.distributed.get_rank()), or gather from one rank's rows only.",
                       stacklevel=4)

    def _user_epoch(self, sampler: Any) -> int | None:
        target = sampler if sampler is not None else getattr(self.loader, "sampler", None)
        epoch = getattr(target, "epoch", None)
        return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None

    def __iter__(self) -> Iterator[Any]:
        sampler = resumable_sampler(self.loader)
        chosen = self._user_epoch(sampler)
        if chosen is not None and chosen != self._told and self._resume is None:
            self._epoch = chosen  # the user called loader.sampler.set_epoch(e), as with a DistributedSampler
        epoch, resume, self._resume = self._epoch, self._resume, None
        skip = 0
        if sampler is not None:
            sampler.set_epoch(epoch)
            batch_size = getattr(getattr(self.loader, "batch_sampler", None), "batch_size", None)
            if resume is not None and isinstance(batch_size, int):
                sampler.resume(epoch_seed=resume[0], offset=resume[1] * batch_size)
            elif resume is not None:
                skip = resume[1]
        else:
            set_sampler_epoch(self.loader, epoch)
            skip = resume[1] if resume is not None else 0
        self._told, self._current, self._epoch = epoch, epoch, epoch + 1
        self._taken = resume[1] if resume is not None else 0
        self._finished = False
        where = self._where
        where[0], where[1] = epoch, self._taken - 1
        to_device = self._strategy.batch_to_device if self._move else None
        if resume is None:
            batches = iter(self.loader)
        else:  # the DataLoader draws its base seed here, a draw the saved run made before it was saved
            before = torch.get_rng_state()
            batches = iter(self.loader)
            torch.set_rng_state(before)
        if skip:  # no sampler to start later in: take the batches the saved run had taken, and drop them
            next(itertools.islice(batches, skip - 1, skip), None)
        self._passes.append(self)
        try:
            for batch in batches:
                PROGRESS.report()
                where[1] += 1
                self._taken += 1
                yield batch if to_device is None else to_device(batch)
            self._finished = True
        finally:
            self._passes.remove(self)
        self._on_pass_end()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["loader"], name)
