"""Stochastic Weight Averaging: an equal average of the weights at the start of the last epochs, with SWALR."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from torch import nn
from torch.optim.swa_utils import SWALR
from typing_extensions import override

from xtrain.core._internal.optim import SchedulerConfig
from xtrain.core.callbacks.weight_averaging import WeightAveraging
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["StochasticWeightAveraging"]

_BATCH_NORM = (nn.modules.batchnorm._BatchNorm,)


class StochasticWeightAveraging(WeightAveraging):
    """Averages the weights found at the start of each epoch from ``swa_epoch_start`` to the last (Izmailov et al.).

    As in Lightning the average takes the weights as each SWA epoch starts, so with ``swa_epoch_start=2`` and
    ``max_epochs=4`` it holds the weights reached at the end of epochs 0, 1 and 2 (the last epoch's training is not
    in it). From the first SWA epoch the learning rate is annealed to ``swa_lrs`` by
    :class:`torch.optim.swa_utils.SWALR` (replacing the module's epoch schedulers). As in Lightning, validation and
    ``checkpoint["state_dict"]`` see the training weights (the average rides beside them in the checkpoint, so a
    resume continues both). When fitting runs to ``max_epochs`` the module receives the average, with
    batch-norm statistics recomputed by running ``training_step`` over the training batches without gradients (the
    module needs no ``forward``; the statistics are averaged over ranks, so every rank ends with the same model).
    A fit stopped earlier keeps its trained weights, as in Lightning.

    Args:
        swa_lrs: The SWA learning rate, one for all parameter groups or one per group (``None``: keep the schedule).
        swa_epoch_start: The first SWA epoch, counted from 1 as in Lightning (``2``: the second epoch, where
            ``current_epoch == 1``), or a float in (0, 1): that fraction of ``max_epochs``.
        annealing_epochs: Epochs over which SWALR moves the learning rate to ``swa_lrs``.
        annealing_strategy: ``"cos"`` or ``"linear"``.
        avg_fn: The per-parameter averaging function (default: the equal running mean).
        device: Where the averaged copy lives (``None``: beside the module).
    """

    evaluates_average: ClassVar[bool] = False

    def __init__(self, swa_lrs: float | list[float] | None = None, *, swa_epoch_start: int | float = 0.8,
                 annealing_epochs: int = 10, annealing_strategy: Literal["cos", "linear"] = "cos",
                 avg_fn: Any = None, device: str | torch.device | None = None) -> None:
        if isinstance(swa_epoch_start, float) and not 0 < swa_epoch_start < 1:
            raise ConfigError("swa_epoch_start", swa_epoch_start, "as a float must be a fraction in (0, 1).",
                              fix="write swa_epoch_start=0.8, or an epoch number like swa_epoch_start=8.")
        if isinstance(swa_epoch_start, int) and swa_epoch_start < 0:
            raise ConfigError("swa_epoch_start", swa_epoch_start, "must not be negative.", fix="write swa_epoch_start=0.")
        if annealing_strategy not in ("cos", "linear"):
            raise ConfigError("annealing_strategy", annealing_strategy, "is not an SWALR strategy.",
                              choices=["cos", "linear"], fix="write annealing_strategy='cos'.")
        lrs = [swa_lrs] if isinstance(swa_lrs, (int, float)) else swa_lrs
        if lrs is not None and any(not isinstance(lr, (int, float)) or lr <= 0 for lr in lrs):
            raise ConfigError("swa_lrs", swa_lrs, "must be positive learning rates.", fix="write swa_lrs=1e-2.")
        super().__init__(device=device, use_buffers=False, avg_fn=avg_fn)
        self.swa_lrs = swa_lrs
        self.swa_epoch_start = swa_epoch_start
        self.annealing_epochs = annealing_epochs
        self.annealing_strategy = annealing_strategy
        self._start = 0
        self._end: float = math.inf
        self._latest_update_epoch = -1

    def _start_epoch(self, trainer: Trainer) -> int:
        """The 0-based index of the first SWA epoch: ``swa_epoch_start`` counts from 1, as in Lightning."""
        if isinstance(self.swa_epoch_start, int):
            return max(self.swa_epoch_start - 1, 0)
        if trainer.max_epochs is None or trainer.max_epochs < 1:
            raise ConfigError("swa_epoch_start", self.swa_epoch_start, "is a fraction of max_epochs, which is unset.",
                              fix="pass an epoch number (swa_epoch_start=8) or set max_epochs.")
        return max(int(self.swa_epoch_start * trainer.max_epochs) - 1, 0)

    @override
    def setup(self, trainer: Trainer, module: TrainModule, stage: str, /) -> None:
        if stage == "fit":
            self._start = self._start_epoch(trainer)
            self._end = trainer.max_epochs - 1 if _bounded(trainer) else math.inf

    @override
    def should_update(self, *, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """``epoch_idx`` is the epoch about to start: its starting weights join the average."""
        return epoch_idx is not None and self._start <= epoch_idx <= self._end

    def _install_swalr(self, trainer: Trainer) -> None:
        if self.swa_lrs is None or not trainer.optimizers:
            return
        optimizer = trainer.optimizers[0]
        scheduler = SWALR(optimizer, swa_lr=self.swa_lrs, anneal_epochs=self.annealing_epochs,  # type: ignore[arg-type]
                          anneal_strategy=self.annealing_strategy)
        kept = [c for c in trainer.lr_scheduler_configs if c.interval == "step"]
        trainer.lr_scheduler_configs[:] = [*kept, SchedulerConfig(scheduler, interval="epoch")]

    @override
    def on_train_epoch_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        epoch = trainer.current_epoch
        if epoch == self._start:
            self._install_swalr(trainer)
        if epoch > self._latest_update_epoch and self.should_update(epoch_idx=epoch):
            self._update(trainer)
            self._latest_update_epoch = epoch

    @override
    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        """Nothing: SWA updates when an epoch starts, not when it ends."""

    @override
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "latest_update_epoch": self._latest_update_epoch}

    @override
    def load_state_dict(self, state: dict[str, Any], /) -> None:
        super().load_state_dict(state)
        self._latest_update_epoch = int(state.get("latest_update_epoch", -1))

    @override
    def on_load_checkpoint(self, trainer: Trainer, module: TrainModule, checkpoint: dict[str, Any], /) -> None:
        super().on_load_checkpoint(trainer, module, checkpoint)
        # Resuming after SWA started: SWALR must be in place before the trainer loads the schedulers' states.
        loops = checkpoint.get("loops", {})
        epoch, mid_epoch = int(loops.get("epoch", 0)), int(loops.get("batches_in_epoch", 0)) > 0
        if trainer.state == "fit" and (epoch > self._start or (epoch == self._start and mid_epoch)):
            self._install_swalr(trainer)

    @override
    def on_fit_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        if self.num_averaged == 0 or (_bounded(trainer) and trainer.current_epoch < self._end + 1):
            return
        super().on_fit_end(trainer, module)
        live = trainer.strategy.module
        if any(isinstance(m, _BATCH_NORM) for m in live.modules()):
            self._update_batch_norm(trainer, live)

    def _update_batch_norm(self, trainer: Trainer, live: nn.Module) -> None:
        strategy = trainer.strategy
        norms = [m for m in live.modules() if isinstance(m, _BATCH_NORM)]
        momenta = [m.momentum for m in norms]
        for m in norms:  # momentum None: an equal average over the batches, as Lightning's extra pass computes
            m.reset_running_stats()
            m.momentum = None
        was_training = live.training
        live.train()
        limit = trainer.num_training_batches
        with torch.no_grad():
            for batch_idx, batch in enumerate(trainer.train_dataloader or ()):
                if batch_idx >= limit:
                    break
                strategy.run_step("training_step", strategy.batch_to_device(batch), batch_idx)
        live.train(was_training)
        for norm, momentum in zip(norms, momenta, strict=True):
            norm.momentum = momentum
            if norm.running_mean is not None and norm.running_var is not None:
                norm.running_mean.copy_(strategy.reduce(norm.running_mean, "mean"))
                norm.running_var.copy_(strategy.reduce(norm.running_var, "mean"))
        averaged = self.averaged_model
        assert averaged is not None
        with torch.no_grad():  # the averaged copy ends identical to the module, on every rank
            for kept, final in zip(averaged.buffers(), live.buffers(), strict=True):
                kept.copy_(final)


def _bounded(trainer: Trainer) -> bool:
    """Whether fitting has a last epoch (``max_epochs`` set and not ``-1``), which bounds the SWA epochs."""
    return trainer.max_epochs is not None and trainer.max_epochs >= 0
