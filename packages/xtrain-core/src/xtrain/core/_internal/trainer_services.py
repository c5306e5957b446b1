"""What the loops call on the Trainer once a step or an epoch is done: rows to the loggers and scheduler steps.

A mixin of :class:`~xtrain.core.Trainer`: when a metric reaches the loggers and when a learning-rate scheduler
steps both follow Lightning's order around the end hooks, and are kept together apart from the run's setup.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Literal

from xtrain.core._internal.hook_overrides import step_scheduler
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from xtrain.core._internal.metrics import MetricStore
    from xtrain.core._internal.optim import SchedulerConfig
    from xtrain.core._internal.progress import FitProgress
    from xtrain.core.loggers.logger import Logger
    from xtrain.core.module import TrainModule

__all__ = ["LoopServices"]


class LoopServices:
    """Logger rows and scheduler steps, called by the fit and evaluation loops; the loggers' flush on abort (mixed in)."""

    loggers: list[Logger]
    lr_scheduler_configs: list[SchedulerConfig]
    _metrics: MetricStore
    _progress: FitProgress
    _step_log_due: bool
    _schedulers_resumed: bool
    # 1 from a counted batch's step (every batch under manual optimization) until the next batch or epoch starts:
    # Lightning's count of stepped batches goes up only after the batch's rows, validation and epoch end.
    _label_lag: int

    if TYPE_CHECKING:  # defined on the Trainer
        @property
        def module(self) -> TrainModule: ...
        @property
        def is_global_zero(self) -> bool: ...
        @property
        def global_step(self) -> int: ...
        @property
        def current_epoch(self) -> int: ...
        @property
        def callback_metrics(self) -> dict[str, torch.Tensor]: ...

    def _logged_step(self) -> int:
        """The step logger rows are written at, as Lightning's: the batches that stepped before the one being
        processed (its rows, its validation's and its epoch end's are one less than ``global_step`` after it
        stepped); under manual optimization the batches trained before it (two optimizers step twice per batch; a
        row is a batch's)."""
        count = self.global_step if self.module.automatic_optimization else self._progress.total_batches
        return count - self._label_lag

    def _write_step_logs(self) -> None:
        """Send the step's metrics to the loggers, after the batch's ``on_train_batch_end`` hooks (as Lightning):
        a value those hooks log belongs to this step's row. Called by the fit loop when a row is due."""
        if not self._step_log_due:
            return
        self._step_log_due = False
        self._write_logs(self._metrics.step_metrics_for_logger(), True)

    def _step_schedulers(self, interval: Literal["epoch", "step"], *, plateau: bool | None = None,
                         count: int | None = None) -> None:
        """Step the schedulers of ``interval`` that are due; ``plateau``: only ReduceLROnPlateau ones (True), only
        the others (False), all (None). Lightning steps epoch ones at the last batch and plateau ones after the
        epoch-end hooks (they read what those logged); step ones after the optimizer step and plateau ones after
        the batch's end hooks and the validation due then. ``count``: the frequency count (default: that of the
        batch in progress, or of the epoch)."""
        if self._schedulers_resumed:
            # Resumed from a checkpoint taken after an epoch's last step: its epoch-end scheduler step comes before
            # this process's first optimizer step, and torch would warn about an order the run did keep.
            self._schedulers_resumed = False
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before")
                self._step_schedulers(interval, plateau=plateau, count=count)
            return
        # As Lightning: a "step" scheduler's frequency counts the batches of the current epoch (the epoch's first
        # optimizer step after its 2nd batch steps a frequency-2 scheduler, whatever the steps before).
        if count is None:
            count = self._progress.batches_in_epoch + 1 if interval == "step" else self.current_epoch + 1
        for config in self.lr_scheduler_configs:
            if config.interval != interval or count % config.frequency or (
                    plateau is not None and plateau != config.needs_metric):
                continue
            if config.needs_metric:
                assert config.monitor is not None
                metric = self.callback_metrics.get(config.monitor)
                if metric is None and not config.strict:
                    warnings.warn(f"ReduceLROnPlateau monitors {config.monitor!r}, which was not logged (logged: "
                                  f"{sorted(self.callback_metrics)}); strict=False, so this learning-rate update is "
                                  f"skipped.", RuntimeWarning, stacklevel=2)
                    continue
                if metric is None:
                    logged = sorted(self.callback_metrics)
                    raise ConfigError("monitor", config.monitor, "was never logged, so ReduceLROnPlateau cannot use it"
                                      + ("." if logged else " (nothing was logged before this scheduler's step)."),
                                      choices=logged or None, fix=f"log it with self.log({config.monitor!r}, value).")
                step_scheduler(self.module, config.scheduler, float(metric))
            else:
                step_scheduler(self.module, config.scheduler, None)

    def _epoch_end_logs(self, values: dict[str, float], *, log: bool = True) -> dict[str, float]:
        """After an epoch's end hooks: its aggregated ``values`` (``MetricStore.end_epoch``, taken before the hooks
        so that they see them in ``callback_metrics``) and what those hooks logged, to the loggers as one row, as
        Lightning writes them."""
        values = {**values, **self._metrics.take_pending()}
        self._write_logs(values, log)
        return values

    def _write_logs(self, values: dict[str, float], log: bool, *, step: int | None = None) -> None:
        """One row of ``values`` (with the epoch) to every logger, at ``step`` (default ``global_step``)."""
        if log and values and self.is_global_zero:
            step = self._logged_step() if step is None else step
            for logger in self.loggers:
                logger.log_metrics({"epoch": float(self.current_epoch), **values}, step)

    def _flush_loggers(self) -> None:
        """Write what loggers hold in memory; called when this rank is ended because another one failed."""
        if self.is_global_zero:
            for logger in self.loggers:
                logger.finalize("failed")
