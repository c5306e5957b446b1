"""A user's own samplers and batch samplers: split across ranks, and told each epoch (as Lightning and Fabric do)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Sampler, SequentialSampler
from torch.utils.data.distributed import DistributedSampler

from xtrain.core import Engine, Trainer
from xtrain.core._internal.data import prepare_dataloader
from xtrain.core.testing import TinyClassifier, tiny_dataset


class Fixed(BatchSampler):
    """Yields the batches it was given (a bucketing sampler's output, say)."""

    def __init__(self, batches: list[list[int]]) -> None:
        super().__init__(SequentialSampler(range(sum(map(len, batches)))), 1, drop_last=False)
        self.batches = batches

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def _split(loader: DataLoader[Any], rank: int) -> DataLoader[Any]:
    out: DataLoader[Any] = prepare_dataloader(loader, distributed={"num_replicas": 2, "rank": rank},
                                              use_distributed_sampler=True, training=True)
    return out


def test_a_custom_batch_sampler_is_split_by_whole_batches_padded_to_equal_steps() -> None:
    batches = [[0, 1], [2], [3, 4, 5], [6], [7, 8]]  # 5 batches: rank 1 repeats the first to match rank 0's 3 steps
    data = list(range(9))
    seen = []
    for rank in (0, 1):
        loader = _split(DataLoader(data, batch_sampler=Fixed(batches)), rank)
        assert len(loader) == 3
        seen.append([[int(i) for i in batch] for batch in loader])
    assert seen == [[[0, 1], [3, 4, 5], [7, 8]], [[2], [6], [0, 1]]]


def test_a_batch_sampler_over_a_distributed_sampler_is_the_users_own_sharding() -> None:
    data = list(range(8))
    inner = DistributedSampler(data, num_replicas=2, rank=1, shuffle=False)  # type: ignore[arg-type]
    loader = DataLoader(data, batch_sampler=Fixed([[0]]))
    loader.batch_sampler.sampler = inner  # type: ignore[union-attr]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _split(loader, 0) is loader


def test_a_batch_sampler_without_a_length_stays_as_it_is_with_a_warning() -> None:
    class Stream(Sampler[list[int]]):
        def __iter__(self) -> Iterator[list[int]]:
            return iter([[0, 1], [2, 3]])

    loader = DataLoader(list(range(4)), batch_sampler=Stream())
    with pytest.warns(UserWarning, match="batch sampler Stream has no length, so it is used as is"):
        assert _split(loader, 1) is loader


def test_a_loader_without_batching_is_split_by_samples() -> None:
    seen = [[int(x) for x in _split(DataLoader(list(range(5)), batch_size=None), rank)] for rank in (0, 1)]
    assert seen == [[0, 2, 4], [1, 3, 0]]


class Epochs(SequentialSampler):
    """A sampler that records the epochs it is told."""

    def __init__(self, data: Any) -> None:
        super().__init__(data)
        self.epochs: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


class EpochBatches(BatchSampler):
    def __init__(self, sampler: Epochs) -> None:
        super().__init__(sampler, 8, drop_last=False)
        self.epochs: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


def test_the_trainer_tells_a_custom_sampler_and_batch_sampler_each_epoch() -> None:
    data = tiny_dataset(32)
    sampler = Epochs(data)
    batches = EpochBatches(Epochs(data))
    _quiet(max_epochs=3).fit(TinyClassifier(), DataLoader(data, batch_size=8, sampler=sampler))
    assert sampler.epochs == [0, 1, 2]
    _quiet(max_epochs=2).fit(TinyClassifier(), DataLoader(data, batch_sampler=batches))
    assert batches.epochs == [0, 1] and batches.sampler.epochs == [0, 1]  # type: ignore[attr-defined]


def test_a_subclass_of_a_torch_sampler_keeps_its_own_order() -> None:
    """Only torch's own samplers are replaced by the resumable one: a subclass may order samples its own way (it was
    replaced, and trained in plain order)."""

    class Backwards(SequentialSampler):
        def __iter__(self) -> Iterator[int]:
            return iter(range(len(self) - 1, -1, -1))

    class Mine(DistributedSampler):  # type: ignore[type-arg]
        pass

    data = list(range(6))
    kept = prepare_dataloader(DataLoader(data, batch_size=2, sampler=Backwards(data)), distributed=None,
                              use_distributed_sampler=True, training=True)
    assert [int(i) for batch in kept for i in batch] == [5, 4, 3, 2, 1, 0]
    mine = DataLoader(data, batch_size=2, sampler=Mine(data, num_replicas=2, rank=1, shuffle=False))
    assert _split(mine, 0) is mine  # the user's own sharding: not split again


def _quiet(**kwargs: Any) -> Trainer:
    return Trainer(enable_progress_bar=False, enable_model_summary=False, logger=False, enable_checkpointing=False,
                   **kwargs)


def test_the_engine_tells_a_custom_sampler_each_pass() -> None:
    data = tiny_dataset(16)
    sampler = Epochs(data)
    engine = Engine(accelerator="cpu", devices=1)
    loader = engine.setup_dataloaders(DataLoader(data, batch_size=8, sampler=sampler))
    for _ in range(2):
        assert sum(1 for _ in loader) == 2
    assert sampler.epochs == [0, 1]
    assert torch.is_tensor(next(iter(loader))[0])


@pytest.mark.parametrize("shuffle", [False, True])
def test_predict_sharding_repeats_no_sample(shuffle: bool) -> None:
    """predict's sharding (pad=False): 11 samples on 2 ranks are 6 + 5, each exactly once, the lengths agree with
    what is yielded; validation's (pad=True) gives both ranks 6, repeating one."""
    from xtrain.core._internal.sampler import ResumableSampler
    from xtrain.core._internal.sharded_sampler import ShardedSampler

    data = list(range(11))
    for pad, sizes in ((False, [6, 5]), (True, [6, 6])):
        shards = [list(ResumableSampler(data, shuffle=shuffle, num_replicas=2, rank=r, pad=pad)) for r in (0, 1)]
        assert [len(s) for s in shards] == sizes
        assert [len(ResumableSampler(data, shuffle=shuffle, num_replicas=2, rank=r, pad=pad)) for r in (0, 1)] == sizes
        both = shards[0] + shards[1]
        assert sorted(set(both)) == data and len(both) == (11 if not pad else 12)
        custom = [list(ShardedSampler(range(11), num_replicas=2, rank=r, pad=pad)) for r in (0, 1)]
        assert [len(c) for c in custom] == sizes == [len(ShardedSampler(range(11), num_replicas=2, rank=r, pad=pad))
                                                     for r in (0, 1)]


def test_persistent_workers_end_with_the_stage() -> None:
    """persistent_workers=True keeps worker processes between epochs; they ended only when the loader was collected
    (two more processes after each fit). Lightning stops them at the stage's end; so does xtrain now."""
    import multiprocessing

    loader = DataLoader(tiny_dataset(64), batch_size=16, num_workers=2, persistent_workers=True)
    trainer = Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False)
    trainer.fit(TinyClassifier(), loader, DataLoader(tiny_dataset(32), batch_size=16, num_workers=1,
                                                     persistent_workers=True))
    assert multiprocessing.active_children() == []
    trainer.fit(TinyClassifier(), loader)  # a second fit starts workers afresh
    assert multiprocessing.active_children() == [] and trainer.global_step == 8
