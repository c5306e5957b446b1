"""Logging the accelerator's device statistics (memory, utilisation) during training."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch
from typing_extensions import override

from xtrain.core.callbacks.callback import Callback

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["DeviceStatsMonitor"]


class DeviceStatsMonitor(Callback):
    """Sends ``device_stats/<name>`` from the accelerator's ``get_device_stats`` to the loggers.

    Why here and not in the model: which numbers exist depends on the hardware (CUDA reports allocator memory, the CPU
    its resident set size), and the accelerator of the run's strategy is the one place that knows. The statistics
    are read on the logging steps only (every ``log_every_n_steps``), from rank 0's device.

    Args:
        cpu_stats: Lightning's switch: ``True`` adds the process's CPU statistics to an accelerator's (on the CPU
            they are the device's anyway); ``None`` or ``False``: the device's alone.
        prefix: Prepended to every key.
    """

    reads_gradients: ClassVar[bool] = False

    def __init__(self, cpu_stats: bool | None = None, *, prefix: str = "device_stats/") -> None:
        self.cpu_stats = cpu_stats
        self.prefix = prefix
        self.last: dict[str, float] = {}

    def _log(self, trainer: Trainer, when: str) -> None:
        step = trainer._logged_step()  # the batch count under manual optimization, as every logger row
        if not trainer.loggers or (step + 1) % trainer.log_every_n_steps != 0:  # Lightning's rows' pace
            return
        strategy = trainer.strategy
        stats = strategy.accelerator.get_device_stats(strategy.root_device)
        if self.cpu_stats and strategy.root_device.type != "cpu":
            from xtrain.core.defaults.cpu import CPUAccelerator

            stats = {**stats, **CPUAccelerator().get_device_stats(torch.device("cpu"))}
        self.last = {f"{self.prefix}{when}/{key}": float(value) for key, value in stats.items()}
        if trainer.is_global_zero and self.last:
            for logger in trainer.loggers:
                logger.log_metrics(self.last, step)

    @override
    def on_train_batch_start(self, trainer: Trainer, module: TrainModule, batch: Any, batch_idx: int, /) -> None:
        self._log(trainer, "on_train_batch_start")

    @override
    def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any,
                           batch_idx: int, /) -> None:
        self._log(trainer, "on_train_batch_end")
