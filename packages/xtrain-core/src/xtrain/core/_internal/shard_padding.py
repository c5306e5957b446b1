"""Which samples an evaluation on several ranks counts twice.

To give every rank as many batches, a distributed sampler repeats up to ``world_size - 1`` items of a dataset that
does not divide evenly. Lightning warns at every ``validate``/``test`` on several devices that this may happen; the
sampler here knows whether it does, so the Trainer warns only then, with the numbers, and the Engine's
``gather_for_metrics`` drops exactly the repeated rows.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from xtrain.core.rank_zero import rank_zero_warn

__all__ = ["Layout", "Repeat", "Sharding", "sharding_of", "warn_repeated_samples"]

Layout = Literal["samples", "batches"]
Repeat = int | Literal["all"] | None  # what of the current batch repeats another rank's: see EngineLoader.share


class Sharding(Protocol):
    def __len__(self) -> int: ...

    def ends_with_repeat(self) -> bool: ...

    def padding(self) -> tuple[int, int]: ...


def sharding_of(loader: Any) -> tuple[Layout, Sharding] | None:
    """How xtrain split ``loader`` across ranks: every ``world_size``-th sample (``"samples"``), or whole batches
    (``"batches"``: a custom batch sampler, or single items without a batch size); ``None`` when it did not."""
    from xtrain.core._internal.sampler import ResumableSampler
    from xtrain.core._internal.sharded_sampler import ShardedBatchSampler, ShardedSampler

    batch_sampler = getattr(loader, "batch_sampler", None)
    sampler = getattr(batch_sampler, "sampler", None)
    if isinstance(batch_sampler, ShardedBatchSampler):
        return "batches", batch_sampler
    if isinstance(sampler, ShardedSampler) or (isinstance(sampler, ResumableSampler)
                                               and sampler.num_replicas is not None):
        return "samples", sampler
    whole = getattr(loader, "sampler", None)
    if batch_sampler is None and isinstance(whole, ShardedSampler):
        return "batches", whole
    return None


def warn_repeated_samples(loaders: list[Any], stage: str, *, world_size: int) -> None:
    """Say, on rank 0, which of ``stage``'s (``"validate"``, ``"test"``) dataloaders repeat samples to even out
    the ranks, and how many."""
    noun = "validation" if stage == "validate" else stage
    for index, loader in enumerate(loaders):
        found = sharding_of(loader)
        if found is None:
            continue
        layout, sharding = found
        repeated, total = sharding.padding()
        if not repeated:
            continue
        unit = "sample" if layout == "samples" else "batch"
        plural = "es" if unit == "batch" else "s"
        rank_zero_warn(
            f"trainer.{stage}() on {world_size} processes: {noun} dataloader {index} has {total} {unit}{plural}, "
            f"which do not divide by {world_size}, so the distributed sampler repeats {repeated} "
            f"{unit}{plural if repeated > 1 else ''} to give every rank as many, and the epoch's metrics count "
            f"{'them' if repeated > 1 else 'it'} twice (as Lightning's DistributedSampler does). For exact "
            f"figures, {stage} on one device (Trainer(devices=1)), or pass use_distributed_sampler=False with a "
            f"dataloader that gives each rank its own share (docs/guides/metrics.md, Padding).", stacklevel=4)
