"""Logging the learning rate of every optimizer parameter group."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import torch
from typing_extensions import override

from xtrain.core.callbacks.callback import Callback
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["LearningRateMonitor"]


class LearningRateMonitor(Callback):
    """Sends ``lr-<Optimizer>`` (``/pg<N>`` for extra parameter groups) to the loggers.

    As in Lightning, a value is read when a batch (or an epoch) starts: it is the learning rate that batch trains
    with, logged on the row of that batch's step metrics (a scheduler stepped after the batch shows on the next
    row). :attr:`lrs` keeps every value logged, by name.

    Args:
        logging_interval: ``"step"`` (with the step metrics, every ``log_every_n_steps``) or ``"epoch"``.
        log_momentum: Also log ``momentum-<Optimizer>`` (or Adam's beta1).
    """

    def __init__(self, logging_interval: Literal["step", "epoch"] = "step", *, log_momentum: bool = False) -> None:
        if logging_interval not in ("step", "epoch"):
            raise ConfigError("logging_interval", logging_interval, "is not a LearningRateMonitor interval.",
                              choices=["step", "epoch"], fix="write logging_interval='step'.")
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.lrs: dict[str, list[float]] = {}
        self._logged_step = -1

    def values(self, trainer: Trainer) -> dict[str, float]:
        """The current learning rates (and momenta), keyed as they are logged."""
        out: dict[str, float] = {}
        names: dict[str, int] = {}
        for optimizer in trainer.optimizers:
            base = f"lr-{type(optimizer).__name__}"
            count = names.get(base, 0)
            names[base] = count + 1
            base = base if count == 0 else f"{base}-{count}"
            for i, group in enumerate(optimizer.param_groups):
                suffix = "" if len(optimizer.param_groups) == 1 else f"/pg{i + 1}"
                out[f"{base}{suffix}"] = float(group["lr"])
                if self.log_momentum:
                    momentum: Any = group.get("momentum", group.get("betas", (None,))[0])
                    if momentum is not None:
                        out[f"{base.replace('lr-', 'momentum-', 1)}{suffix}"] = float(momentum)
        return out

    def _log(self, trainer: Trainer, step: int) -> None:
        values = self.values(trainer)
        for key, value in values.items():
            if not key.startswith("momentum-"):
                self.lrs.setdefault(key, []).append(value)
        # Every rank sees them in callback_metrics (as Lightning's monitor puts them there), e.g. for a filename.
        device = trainer.strategy.root_device
        trainer.callback_metrics.update({k: torch.tensor(v, device=device) for k, v in values.items()})
        if trainer.is_global_zero and trainer.loggers:
            for logger in trainer.loggers:
                logger.log_metrics(values, step)

    @override
    def on_train_batch_start(self, trainer: Trainer, module: TrainModule, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step + 1  # the step this batch's metrics are logged at (once, when accumulating)
        if self.logging_interval == "step" and step % trainer.log_every_n_steps == 0 and step != self._logged_step:
            self._logged_step = step
            self._log(trainer, step)

    @override
    def on_train_epoch_start(self, trainer: Trainer, module: TrainModule) -> None:
        if self.logging_interval == "epoch":
            self._log(trainer, trainer.global_step)
