"""Reading what ``configure_optimizers`` returned."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from xtrain.core.errors import ConfigError

__all__ = ["SchedulerConfig", "follow_replaced_optimizers", "parse_optimizers"]

_FORMS = ("an optimizer", "a list of optimizers", "(optimizers, schedulers)", "{'optimizer': ..., 'lr_scheduler': ...}",
          "a list of such dicts")


@dataclass(slots=True)
class SchedulerConfig:
    """An LR scheduler and when to step it."""

    scheduler: Any
    interval: Literal["epoch", "step"] = "epoch"
    frequency: int = 1
    monitor: str | None = None
    name: str | None = None
    strict: bool = True  # False: a monitor that was not logged skips the step with a warning (Lightning's "strict")

    @property
    def needs_metric(self) -> bool:
        return isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)

    @property
    def reduce_on_plateau(self) -> bool:
        """Lightning's name for :attr:`needs_metric` (``trainer.lr_scheduler_configs[0].reduce_on_plateau``)."""
        return self.needs_metric


def _scheduler(value: Any) -> SchedulerConfig:
    if isinstance(value, Mapping):
        if "scheduler" not in value:
            raise ConfigError("configure_optimizers", dict(value), "an lr_scheduler dict needs a 'scheduler' key.",
                              fix="return {'scheduler': sched, 'interval': 'epoch'}.")
        unknown = set(value) - {"scheduler", "interval", "frequency", "monitor", "name", "strict"}
        if unknown:
            raise ConfigError("configure_optimizers", sorted(unknown), "are not lr_scheduler keys.",
                              choices=["scheduler", "interval", "frequency", "monitor", "name", "strict"],
                              fix="remove or rename them.")
        interval = value.get("interval", "epoch")
        if interval not in ("epoch", "step"):
            raise ConfigError("interval", interval, "is not an lr_scheduler interval.", choices=["epoch", "step"],
                              fix="write 'interval': 'epoch' or 'step'.")
        frequency = value.get("frequency", 1)
        if not isinstance(frequency, int) or isinstance(frequency, bool) or frequency < 1:
            raise ConfigError("frequency", frequency, "must be a positive int.", fix="write 'frequency': 1.")
        strict = value.get("strict", True)
        if not isinstance(strict, bool):
            raise ConfigError("strict", strict, "must be True or False.", choices=[True, False],
                              fix="write 'strict': False to skip the scheduler's step while its monitor is missing.")
        config = SchedulerConfig(value["scheduler"], interval, frequency, value.get("monitor"), value.get("name"),
                                 strict)
    else:
        config = SchedulerConfig(value)
    if config.needs_metric and config.monitor is None:
        raise ConfigError("configure_optimizers", type(config.scheduler).__name__,
                          "ReduceLROnPlateau needs a metric to monitor.",
                          fix="return {'optimizer': opt, 'lr_scheduler': sched, 'monitor': 'val_loss'} or "
                              "{'scheduler': sched, 'monitor': 'val_loss'} as the lr_scheduler (in a CLI "
                              "config: lr_scheduler: {class_path: xtrain.core.cli.ReduceLROnPlateau, init_args: "
                              "{monitor: val_loss}}).")
    return config


def parse_optimizers(result: Any) -> tuple[list[torch.optim.Optimizer], list[SchedulerConfig]]:
    """Normalize ``configure_optimizers()``'s return value into optimizers and scheduler configs."""
    optimizers: list[Any]
    schedulers: list[Any] = []
    if isinstance(result, torch.optim.Optimizer):
        optimizers = [result]
    elif isinstance(result, Mapping) or (isinstance(result, Sequence) and not isinstance(result, str) and result
                                         and all(isinstance(item, Mapping) for item in result)):
        # {"optimizer": ..., "lr_scheduler": ...}, or a list of such dicts, one per optimizer (as in Lightning).
        optimizers = []
        for item in [result] if isinstance(result, Mapping) else result:
            if "optimizer" not in item:
                raise ConfigError("configure_optimizers", dict(item), "a dict needs an 'optimizer' key.",
                                  choices=_FORMS, fix="return {'optimizer': opt, 'lr_scheduler': sched}.")
            optimizers.append(item["optimizer"])
            scheduler = item.get("lr_scheduler")
            if scheduler is not None:
                # As Lightning: {"optimizer": o, "lr_scheduler": plateau, "monitor": "m"} names the plateau's metric.
                if (isinstance(result, Mapping) and result.get("monitor") is not None
                        and isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)):
                    scheduler = {"scheduler": scheduler, "monitor": result["monitor"]}
                schedulers.append(scheduler)
    elif isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], Sequence):
        optimizers, schedulers = list(result[0]), list(result[1])
    elif isinstance(result, Sequence) and not isinstance(result, str):
        optimizers = list(result)
    else:
        raise ConfigError("configure_optimizers", result, "returned something that is not an optimizer form.",
                          choices=_FORMS, fix="return an optimizer, e.g. torch.optim.SGD(self.parameters(), lr=0.1).")
    if not optimizers or not all(isinstance(o, torch.optim.Optimizer) for o in optimizers):
        raise ConfigError("configure_optimizers", optimizers, "must return at least one torch.optim.Optimizer.",
                          choices=_FORMS, fix="return an optimizer, e.g. torch.optim.SGD(self.parameters(), lr=0.1).")
    return optimizers, [_scheduler(s) for s in schedulers]


def follow_replaced_optimizers(configs: Sequence[SchedulerConfig], before: Sequence[torch.optim.Optimizer],
                               after: Sequence[torch.optim.Optimizer]) -> None:
    """Point LR schedulers at the optimizers a strategy returned in place of the user's.

    ``Strategy.setup_optimizers`` may return new objects (Horovod's ``DistributedOptimizer`` is a new instance of a
    subclass). The schedulers the user built still hold the old ones: their ``state_dict`` and ``get_last_lr`` work
    either way, but torch's check that ``optimizer.step()`` ran before ``scheduler.step()`` watches the old, now
    unused optimizer and warns wrongly. The new optimizer gets the same step tracking.
    """
    for old, new in zip(before, after, strict=True):
        if new is old:
            continue
        for config in configs:
            if getattr(config.scheduler, "optimizer", None) is old:
                config.scheduler.optimizer = new
                _track_steps(new)


def _track_steps(optimizer: torch.optim.Optimizer) -> None:
    """What ``torch.optim.lr_scheduler.LRScheduler`` does to the optimizer it is given: mark each step as taken."""
    step: Callable[..., Any] = optimizer.step
    if getattr(step, "_wrapped_by_lr_sched", False):
        return

    @functools.wraps(step)
    def tracked(*args: Any, **kwargs: Any) -> Any:
        optimizer._opt_called = True  # type: ignore[attr-defined]
        return step(*args, **kwargs)

    tracked._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
    optimizer.step = tracked  # type: ignore[method-assign]
