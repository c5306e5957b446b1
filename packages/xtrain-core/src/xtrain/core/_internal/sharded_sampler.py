"""A user's own sampler or batch sampler split across ranks, as Lightning, Fabric and Accelerate do with custom ones.

Without it, a ``SubsetRandomSampler`` (k-fold cross-validation, say) under ``ddp`` gave every rank all of its samples:
the work was done ``world_size`` times and summed metrics doubled. A custom batch sampler (bucketing by length,
say) is split by whole batches, so its batches stay as it built them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
from typing import Any

from torch.utils.data import Sampler

from xtrain.core._internal.sampler import ends_with_repeat, repeats, shard, shard_size

__all__ = ["ShardedBatchSampler", "ShardedSampler", "tell_epoch"]


def tell_epoch(epoch: int, *owners: object) -> None:
    """Call ``set_epoch(epoch)`` once on each distinct object of ``owners`` that has one (``None`` is skipped)."""
    done: list[object] = []
    for owner in owners:
        if owner is None or any(owner is d for d in done):
            continue
        done.append(owner)
        set_epoch = getattr(owner, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)


class ShardedSampler(Sampler[Any]):
    """This rank's share of what ``sampler`` yields each epoch: every ``num_replicas``-th index from ``rank``.

    The inner sampler is iterated afresh each epoch (its own randomness draws then, as when it is used alone); the
    list is padded from its start to a multiple of ``num_replicas`` (or cut, with ``drop_last``), as
    ``DistributedSampler(shuffle=False)`` pads, so every rank runs the same number of batches.
    """

    def __init__(self, sampler: Iterable[Any], *, num_replicas: int, rank: int, drop_last: bool = False,
                 pad: bool = True) -> None:
        self.sampler = sampler
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = drop_last
        self.pad = pad  # False: no index twice, shares may differ by one (predict's sharding)

    def __len__(self) -> int:
        assert isinstance(self.sampler, Sized)  # prepare_dataloader splits only samplers with a length
        return shard_size(len(self.sampler), self.num_replicas, self.rank, drop_last=self.drop_last, pad=self.pad)

    def ends_with_repeat(self) -> bool:
        """Whether this rank's last item repeats another rank's (the padding of an uneven split)."""
        assert isinstance(self.sampler, Sized)
        return ends_with_repeat(len(self.sampler), self.num_replicas, self.rank, drop_last=self.drop_last,
                                pad=self.pad)

    def padding(self) -> tuple[int, int]:
        """The items all ranks repeat together each epoch, and the items there are."""
        assert isinstance(self.sampler, Sized)
        n = len(self.sampler)
        return repeats(n, self.num_replicas, drop_last=self.drop_last, pad=self.pad), n

    def set_epoch(self, epoch: int) -> None:
        """Passed on to the inner sampler when it has one (a ``DistributedSampler``-like user sampler)."""
        tell_epoch(epoch, self.sampler)

    def __iter__(self) -> Iterator[Any]:
        return iter(shard(list(self.sampler), self.num_replicas, self.rank, drop_last=self.drop_last, pad=self.pad))


class ShardedBatchSampler(Sampler[Any]):
    """This rank's share of the batches ``batch_sampler`` yields each epoch: every ``num_replicas``-th from ``rank``.

    Batches are not rebuilt (a bucketing sampler's batches stay as it made them), and the batch sampler is not
    re-instantiated (its other arguments would be lost). The list is padded from its start to a multiple of
    ``num_replicas``, so every rank runs the same number of steps (a rank with one step more would hang the others
    in their gradient all-reduce).
    """

    def __init__(self, batch_sampler: Iterable[Any], *, num_replicas: int, rank: int) -> None:
        self.batch_sampler = batch_sampler
        self.num_replicas = num_replicas
        self.rank = rank

    def __len__(self) -> int:
        assert isinstance(self.batch_sampler, Sized)  # prepare_dataloader splits only batch samplers with a length
        return shard_size(len(self.batch_sampler), self.num_replicas, self.rank)

    def ends_with_repeat(self) -> bool:
        """Whether this rank's last batch repeats another rank's (the padding of an uneven split)."""
        assert isinstance(self.batch_sampler, Sized)
        return ends_with_repeat(len(self.batch_sampler), self.num_replicas, self.rank)

    def padding(self) -> tuple[int, int]:
        """The batches all ranks repeat together each epoch, and the batches there are."""
        assert isinstance(self.batch_sampler, Sized)
        n = len(self.batch_sampler)
        return repeats(n, self.num_replicas), n

    def set_epoch(self, epoch: int) -> None:
        """Passed on to the batch sampler and to its sampler, where they have one."""
        tell_epoch(epoch, self.batch_sampler, getattr(self.batch_sampler, "sampler", None))

    def __iter__(self) -> Iterator[Any]:
        return iter(shard(list(self.batch_sampler), self.num_replicas, self.rank))
