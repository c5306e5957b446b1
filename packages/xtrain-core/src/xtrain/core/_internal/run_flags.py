"""What the Trainer's behaviour switches (``RunFlags``) do: each is one small function the Trainer or a loop calls.

``overfit_batches`` (the same first batches every epoch, unshuffled), ``min_epochs``/``min_steps`` (a stop request
waits for them), ``reload_dataloaders_every_n_epochs``, ``sync_batchnorm``, ``detect_anomaly``, ``benchmark``,
``deterministic`` and a wall-clock ``val_check_interval``.
"""

from __future__ import annotations

import os
import time
import warnings
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

from xtrain.core._internal.sampler import ResumableSampler
from xtrain.core._internal.trainer_args import RunFlags

if TYPE_CHECKING:
    from xtrain.core.strategy import Strategy

__all__ = ["ValClock", "anomaly_detection", "apply_torch_flags", "draw_as_reloaded", "min_reached", "reload_due",
           "sync_batchnorm", "unshuffled"]


def apply_torch_flags(flags: RunFlags, deterministic: bool | Literal["warn"] | None) -> None:
    """Set torch's deterministic mode and cuDNN's autotuner as given (``None`` leaves each as it is), as Lightning.

    An explicit ``False`` turns the mode off, so a Trainer after a ``deterministic=True`` one in the same process (a
    sweep) does not inherit it. ``deterministic`` without ``benchmark`` turns the autotuner off (it picks
    nondeterministic kernels), and sets ``CUBLAS_WORKSPACE_CONFIG``, without which cuBLAS refuses deterministic mode.
    """
    benchmark = flags.benchmark
    if deterministic and benchmark is None:
        benchmark = False
    elif deterministic and benchmark:
        warnings.warn("deterministic=True with benchmark=True: cuDNN's autotuner may still pick nondeterministic "
                      "kernels. Leave benchmark unset to turn it off.", UserWarning, stacklevel=3)
    if benchmark is not None:
        torch.backends.cudnn.benchmark = benchmark
    if deterministic is not None:
        torch.use_deterministic_algorithms(bool(deterministic), warn_only=deterministic == "warn")
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def anomaly_detection(flags: RunFlags) -> AbstractContextManager[Any]:
    """``torch.autograd.detect_anomaly`` around training when asked (slow: it checks every backward op)."""
    return torch.autograd.set_detect_anomaly(True) if flags.detect_anomaly else nullcontext()


def sync_batchnorm(flags: RunFlags, module: torch.nn.Module, world_size: int) -> None:
    """Replace the module's BatchNorm layers by SyncBatchNorm (in place) when training on several processes."""
    if flags.sync_batchnorm and world_size > 1:
        converted = torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)
        assert converted is module


def unshuffled(loader: Any) -> Any:
    """``loader`` reading in order (``overfit_batches`` trains on the same first batches every epoch)."""
    if not isinstance(loader, DataLoader) or not isinstance(loader.sampler, RandomSampler):
        return loader
    from xtrain.core._internal.data import copy_dataloader

    warnings.warn("overfit_batches: the training dataloader shuffles; xtrain reads it in order instead, so every "
                  "epoch trains on the same first batches (as Lightning does).", UserWarning, stacklevel=2)

    sampler = SequentialSampler(loader.dataset)  # type: ignore[arg-type]
    batch_sampler = loader.batch_sampler
    assert batch_sampler is not None
    return copy_dataloader(loader, sampler=sampler, batch_sampler=BatchSampler(
        sampler, batch_sampler.batch_size, batch_sampler.drop_last))  # type: ignore[attr-defined]


def min_reached(flags: RunFlags, epoch: int, global_step: int) -> bool:
    """Whether a stop request (early stopping) may end training now."""
    return epoch >= flags.min_epochs and global_step >= flags.min_steps


def reload_due(flags: RunFlags, epoch: int) -> bool:
    """Whether the dataloaders are requested again at the start of ``epoch``."""
    every = flags.reload_dataloaders_every_n_epochs
    return every > 0 and epoch > 0 and epoch % every == 0


def draw_as_reloaded(loader: Any) -> None:
    """Take the random number a reload takes in Lightning, so a shuffled order after it stays Lightning's.

    Lightning opens an iterator of the reloaded training loader while setting it up and another for the epoch, and
    each iterator draws the loader's base seed (from its generator, else the global one): one draw more per reload
    than an epoch without. With worker processes that first iterator also prefetches ``prefetch_factor`` batches
    per worker, which starts the sampler's epoch (its draws; to its end when that is all the batches). Drawing
    here costs nothing, where opening an iterator would start the workers.
    """
    if not isinstance(loader, DataLoader):
        return
    torch.empty((), dtype=torch.int64).random_(generator=loader.generator)
    sampler = getattr(loader.batch_sampler, "sampler", loader.sampler)
    if loader.num_workers > 0 and isinstance(sampler, ResumableSampler):
        prefetched = (loader.prefetch_factor or 2) * loader.num_workers
        sampler.draw_as_opened(to_end=prefetched >= len(loader))


class ValClock:
    """Wall-clock validation cadence; rank 0's clock decides for every rank."""

    def __init__(self, interval: timedelta) -> None:
        self.interval = interval.total_seconds()
        self.last = time.monotonic()

    def due(self, strategy: Strategy) -> bool:
        elapsed = time.monotonic() - self.last >= self.interval
        return bool(strategy.broadcast(elapsed)) if strategy.world_size > 1 else elapsed

    def reset(self) -> None:
        self.last = time.monotonic()

