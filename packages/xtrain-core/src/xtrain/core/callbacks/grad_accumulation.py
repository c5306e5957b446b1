"""Changing ``accumulate_grad_batches`` by epoch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from typing_extensions import override

from xtrain.core.callbacks.callback import Callback
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["GradientAccumulationScheduler"]


class GradientAccumulationScheduler(Callback):
    """Accumulates gradients over a number of batches that depends on the epoch.

    Why: small steps early (fast progress) and a larger effective batch later (less noise) without changing the
    dataloader. ``scheduling={0: 1, 4: 2, 8: 4}`` steps after every batch in epochs 0-3, every 2 batches in 4-7 and
    every 4 from epoch 8 on. Windows count batches within the epoch and the last batch of an epoch always steps.

    Args:
        scheduling: ``{first epoch: batches per optimizer step}``; epochs before the first key accumulate 1 batch.
    """

    def __init__(self, scheduling: dict[int, int]) -> None:
        if not isinstance(scheduling, dict) or not scheduling:
            raise ConfigError("scheduling", scheduling, "must be a non-empty dict {epoch: batches}.",
                              fix="write scheduling={0: 1, 4: 2}.")
        for epoch, factor in scheduling.items():
            if not isinstance(epoch, int) or epoch < 0:
                raise ConfigError("scheduling", scheduling, f"has the key {epoch!r}; keys are epochs (ints >= 0).",
                                  fix="write scheduling={0: 1, 4: 2}.")
            if not isinstance(factor, int) or factor < 1:
                raise ConfigError("scheduling", scheduling, f"has the value {factor!r} for epoch {epoch}; values are "
                                  "batch counts (ints >= 1).", fix="write scheduling={0: 1, 4: 2}.")
        self.scheduling = dict(sorted(scheduling.items()))

    def factor(self, epoch: int) -> int:
        """The number of batches accumulated per optimizer step in ``epoch``."""
        found = 1
        for first, factor in self.scheduling.items():
            if epoch >= first:
                found = factor
        return found

    @override
    def setup(self, trainer: Trainer, module: TrainModule, stage: str, /) -> None:
        if stage != "fit":
            return
        if not module.automatic_optimization:
            raise ConfigError("callbacks", "GradientAccumulationScheduler", "schedules automatic optimization, but "
                              "the module optimizes manually (automatic_optimization=False).",
                              fix="accumulate in your training_step instead.")
        if trainer.accumulate_grad_batches != 1:
            raise ConfigError("accumulate_grad_batches", trainer.accumulate_grad_batches, "is set together with a "
                              "GradientAccumulationScheduler, which owns it.",
                              fix="leave accumulate_grad_batches=1 and put the value in the scheduling.")
        if trainer.strategy.handles_gradient_accumulation:
            raise ConfigError("callbacks", "GradientAccumulationScheduler", f"cannot change the window of "
                              f"{trainer.strategy.name!r}, which accumulates gradients itself.",
                              fix="use Trainer(accumulate_grad_batches=N) with this strategy.")

    def _apply(self, trainer: Trainer) -> None:
        trainer.accumulate_grad_batches = self.factor(trainer.current_epoch)

    @override
    def on_train_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        self._apply(trainer)  # also covers a resume in the middle of an epoch (no epoch start then)

    @override
    def on_train_epoch_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        self._apply(trainer)

    @override
    def on_fit_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        trainer.accumulate_grad_batches = 1

    @override
    def on_exception(self, trainer: Trainer, module: TrainModule, exception: BaseException, /) -> None:
        trainer.accumulate_grad_batches = 1
