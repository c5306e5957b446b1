"""Which of a rank's samples repeat another rank's: the rule ``gather_for_metrics`` drops them by."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, SequentialSampler

from xtrain.core import Engine
from xtrain.core._internal.sampler import ResumableSampler, ends_with_repeat, shard
from xtrain.core._internal.sharded_sampler import ShardedBatchSampler, ShardedSampler


@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_dropping_the_repeats_leaves_every_item_once(world: int) -> None:
    for n in range(30):
        kept: list[int] = []
        for rank in range(world):
            share = shard(list(range(n)), world, rank)
            kept += share[:-1] if ends_with_repeat(n, world, rank) else share
        assert sorted(kept) == list(range(n)), (n, world)


def test_drop_last_and_unpadded_shares_repeat_nothing() -> None:
    assert not any(ends_with_repeat(7, 3, rank, drop_last=True) for rank in range(3))
    assert not any(ends_with_repeat(7, 3, rank, pad=False) for rank in range(3))
    assert [ends_with_repeat(7, 3, rank) for rank in range(3)] == [False, True, True]


def test_each_sharding_sampler_answers_for_its_rank() -> None:
    data = list(range(5))
    assert [ResumableSampler(data, shuffle=True, num_replicas=2, rank=r).ends_with_repeat() for r in (0, 1)] == [
        False, True]
    assert not ResumableSampler(data, shuffle=False).ends_with_repeat()  # not sharded
    assert [ShardedSampler(SequentialSampler(data), num_replicas=2, rank=r).ends_with_repeat() for r in (0, 1)] == [
        False, True]
    batches = [[0, 1], [2], [3, 4]]
    assert [ShardedBatchSampler(batches, num_replicas=2, rank=r).ends_with_repeat() for r in (0, 1)] == [False, True]


def test_one_process_gets_its_data_back() -> None:
    engine = Engine(accelerator="cpu", devices=1)
    loader = engine.setup_dataloaders(DataLoader(torch.arange(5), batch_size=2))
    rows = [engine.gather_for_metrics(batch) for batch in loader]
    assert torch.cat(rows).tolist() == [0, 1, 2, 3, 4]
    words = ["a", "b"]
    assert engine.gather_for_metrics(words, use_gather_object=True) is words
    t = torch.ones(2, 3)
    assert engine.pad_across_processes(t, dim=1) is t
