"""A user's own sampler split across ranks, as Lightning and Fabric do with custom samplers.

Without it, a ``SubsetRandomSampler`` (k-fold cross-validation, say) under ``ddp`` gave every rank all of its samples:
the work was done ``world_size`` times and summed metrics doubled.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sized
from typing import Any

from torch.utils.data import Sampler

__all__ = ["ShardedSampler"]


class ShardedSampler(Sampler[Any]):
    """This rank's share of what ``sampler`` yields each epoch: every ``num_replicas``-th index from ``rank``.

    The inner sampler is iterated afresh each epoch (its own randomness draws then, as when it is used alone); the
    list is padded from its start to a multiple of ``num_replicas`` (or cut, with ``drop_last``), as
    ``DistributedSampler(shuffle=False)`` pads, so every rank runs the same number of batches.
    """

    def __init__(self, sampler: Iterable[Any], *, num_replicas: int, rank: int, drop_last: bool = False) -> None:
        self.sampler = sampler
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = drop_last

    def __len__(self) -> int:
        assert isinstance(self.sampler, Sized)  # prepare_dataloader splits only samplers with a length
        n = len(self.sampler)
        if self.drop_last and n % self.num_replicas:
            return n // self.num_replicas
        return math.ceil(n / self.num_replicas)

    def set_epoch(self, epoch: int) -> None:
        """Passed on to the inner sampler when it has one (a ``DistributedSampler``-like user sampler)."""
        inner = getattr(self.sampler, "set_epoch", None)
        if callable(inner):
            inner(epoch)

    def __iter__(self) -> Iterator[Any]:
        indices = list(self.sampler)
        total = len(self) * self.num_replicas
        if not self.drop_last and indices and total > len(indices):
            indices += (indices * math.ceil((total - len(indices)) / len(indices)))[:total - len(indices)]
        return iter(indices[self.rank:total:self.num_replicas])
