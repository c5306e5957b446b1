"""Logging the learning rate (and optionally momentum and weight decay) of every optimizer parameter group."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from typing_extensions import override

from xtrain.core.callbacks.callback import Callback
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["LearningRateMonitor"]

_INTERVALS = (None, "step", "epoch")


class LearningRateMonitor(Callback):
    """Sends each parameter group's learning rate to the loggers, under Lightning's names.

    Names: a scheduler's ``"name"`` from ``configure_optimizers``, else ``lr-<Optimizer class>`` (``-1``, ``-2`` for
    further optimizers of the same class); several parameter groups add ``/<group "name">`` or ``/pg<N>``.
    Momentum is logged as ``<name>-momentum`` (Adam's beta1), weight decay as ``<name>-weight_decay``.

    As in Lightning, a value is read when a batch (or an epoch) starts: it is the learning rate that batch trains
    with, logged on the row of that batch's step metrics (a scheduler stepped after the batch shows on the next
    row). :attr:`lrs` keeps every value logged, by name.

    Args:
        logging_interval: ``None`` (each scheduler at its own interval: a per-epoch scheduler once an epoch, a
            per-step one with the step metrics; an optimizer without scheduler at both), ``"step"`` (every one with
            the step metrics, every ``log_every_n_steps``) or ``"epoch"`` (every one when an epoch starts).
        log_momentum: Also log the momentum (or Adam's beta1; 0 for an optimizer without either).
        log_weight_decay: Also log the weight decay.
    """

    reads_gradients: ClassVar[bool] = False

    def __init__(self, logging_interval: Literal["step", "epoch"] | None = None, *, log_momentum: bool = False,
                 log_weight_decay: bool = False) -> None:
        if logging_interval not in _INTERVALS:
            raise ConfigError("logging_interval", logging_interval, "is not a LearningRateMonitor interval.",
                              choices=list(_INTERVALS), fix="write logging_interval=None (each scheduler's own).")
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay
        self.lrs: dict[str, list[float]] = {}
        self._logged_step = -1

    def _optimizers(self, trainer: Trainer) -> list[tuple[str, Any, str | None]]:
        """Each scheduled optimizer (in scheduler order), then each other one: its name and its scheduler's
        interval (``None`` without a scheduler)."""
        entries: list[tuple[str | None, Any, str | None]] = []
        scheduled: set[int] = set()
        for config in getattr(trainer, "lr_scheduler_configs", []):
            optimizer = getattr(config.scheduler, "optimizer", None)
            if optimizer is not None:
                entries.append((config.name, optimizer, config.interval))
                scheduled.add(id(optimizer))
        entries += [(None, opt, None) for opt in trainer.optimizers if id(opt) not in scheduled]
        counts: dict[type, int] = {}
        named: list[tuple[str, Any, str | None]] = []
        for name, optimizer, interval in entries:
            if name is None:
                count = counts[type(optimizer)] = counts.get(type(optimizer), 0) + 1
                name = f"lr-{type(optimizer).__name__}" + (f"-{count - 1}" if count > 1 else "")
            named.append((name, optimizer, interval))
        return named

    @staticmethod
    def _group_names(name: str, optimizer: Any) -> list[str]:
        groups = optimizer.param_groups
        if len(groups) == 1:
            return [f"{name}/{groups[0]['name']}" if groups[0].get("name") else name]
        labels = [group.get("name", f"pg{i + 1}") for i, group in enumerate(groups)]
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise ConfigError("param_groups", repeated, f"the optimizer logged as {name!r} has several parameter "
                              "groups with the same 'name', so LearningRateMonitor cannot tell them apart.",
                              fix="give each parameter group its own 'name'.")
        return [f"{name}/{label}" for label in labels]

    def values(self, trainer: Trainer, interval: Literal["step", "epoch", "any"] = "any") -> dict[str, float]:
        """The current learning rates (and momenta, weight decays), keyed as they are logged: for ``interval``
        ``"step"``/``"epoch"`` those of the schedulers stepped at that interval and of unscheduled optimizers."""
        return self._values(trainer, interval)[0]

    def _values(self, trainer: Trainer, interval: Literal["step", "epoch", "any"]) -> tuple[dict[str, float], list[str]]:
        """:meth:`values`, and which of their keys are learning rates (a scheduler may be named ``x-momentum``)."""
        out: dict[str, float] = {}
        rates: list[str] = []
        for name, optimizer, stepped in self._optimizers(trainer):
            if interval != "any" and stepped not in (None, interval):
                continue
            betas = "betas" in getattr(optimizer, "defaults", {})
            for key, group in zip(self._group_names(name, optimizer), optimizer.param_groups, strict=True):
                out[key] = float(group["lr"])
                rates.append(key)
                if self.log_momentum:
                    out[f"{key}-momentum"] = float(group["betas"][0] if betas else group.get("momentum", 0))
                if self.log_weight_decay:
                    out[f"{key}-weight_decay"] = float(group.get("weight_decay", 0))
        return out, rates

    def _log(self, trainer: Trainer, step: int, interval: Literal["step", "epoch", "any"]) -> None:
        values, rates = self._values(trainer, interval)
        if not values:
            return
        for key in rates:
            self.lrs.setdefault(key, []).append(values[key])
        # Every rank sees them in callback_metrics (as Lightning's monitor puts them there), e.g. for a filename.
        device = trainer.strategy.root_device
        trainer.callback_metrics.update({k: torch.tensor(v, device=device) for k, v in values.items()})
        if trainer.is_global_zero and trainer.loggers:
            for logger in trainer.loggers:
                logger.log_metrics(values, step)

    @override
    def on_train_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        named = self._optimizers(trainer)
        for name, optimizer, _ in named:
            for key in self._group_names(name, optimizer):
                self.lrs.setdefault(key, [])
        if self.log_momentum and not any({"momentum", "betas"} & set(getattr(opt, "defaults", {}))
                                         for _, opt, _ in named):
            warnings.warn("LearningRateMonitor(log_momentum=True): no optimizer has a momentum or betas, so 0 is "
                          "logged as the momentum.", RuntimeWarning, stacklevel=2)

    @override
    def on_train_batch_start(self, trainer: Trainer, module: TrainModule, batch: Any, batch_idx: int, /) -> None:
        step = trainer._logged_step()  # this batch's rows' step, as Lightning's (once, when accumulating)
        if self.logging_interval != "epoch" and (step + 1) % trainer.log_every_n_steps == 0 and step != self._logged_step:
            self._logged_step = step
            self._log(trainer, step, "step" if self.logging_interval is None else "any")

    @override
    def on_train_epoch_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        if self.logging_interval != "step":
            self._log(trainer, trainer._logged_step(), "epoch" if self.logging_interval is None else "any")
