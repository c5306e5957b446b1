"""A progress bar drawn with ``rich`` on terminals (plain lines elsewhere)."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, TextIO

from typing_extensions import override

from xtrain.core.callbacks.progress import ProgressBar, _fmt_metrics
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["RichProgressBar"]


class RichProgressBar(ProgressBar):
    """Epoch, step, throughput, elapsed time, ETA and the ``prog_bar`` metrics in a ``rich`` progress bar.

    Redraws at most every ``refresh_interval`` seconds (no background refresh thread). When the output is not a
    terminal it prints the same plain lines as :class:`ProgressBar`.

    Args:
        refresh_interval: Seconds between redraws on a terminal.
        log_interval: Seconds between lines when the output is not a terminal.
        stream: Where to draw (default ``sys.stderr``).
        force_terminal: Draw as on a terminal even when ``stream`` is not one.
    """

    def __init__(self, *, refresh_interval: float = 0.1, log_interval: float = 30.0, stream: TextIO | None = None,
                 force_terminal: bool = False) -> None:
        super().__init__(refresh_interval=refresh_interval, log_interval=log_interval, stream=stream)
        try:
            import rich  # noqa: F401
        except ImportError:
            raise ConfigError("callbacks", "RichProgressBar", "needs the rich package.",
                              fix="pip install rich, or use ProgressBar.") from None
        self.force_terminal = force_terminal
        self._progress: Any = None
        self._task: Any = None

    @property
    @override
    def is_terminal(self) -> bool:
        return self.force_terminal or super().is_terminal

    def _start(self) -> Any:
        if self._progress is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            console = Console(file=self.stream, force_terminal=self.is_terminal)
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]} it/s"), TimeElapsedColumn(), TimeRemainingColumn(),
                TextColumn("{task.fields[metrics]}"), console=console, auto_refresh=False, transient=False)
            self._progress.start()
        return self._progress

    def _draw(self, trainer: Trainer) -> None:
        progress = self._start()
        p = trainer._progress
        total = trainer.num_training_batches
        elapsed = max(time.monotonic() - self._epoch_start, 1e-9)
        rate = (p.batches_in_epoch - self._first_batch) / elapsed
        epochs = "" if trainer.max_epochs == -1 else f"/{trainer.max_epochs - 1}"  # 0-based both, as Lightning
        progress.update(self._task, completed=p.batches_in_epoch, total=total if math.isfinite(total) else None,
                        description=f"Epoch {p.epoch}{epochs} step {p.global_step}", rate=f"{rate:.1f}",
                        metrics=_fmt_metrics(trainer.progress_bar_metrics))
        progress.refresh()

    @override
    def on_train_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        super().on_train_start(trainer, module)
        if trainer._progress.batches_in_epoch > 0:  # resumed mid-epoch: no on_train_epoch_start comes
            self._add_epoch_task(trainer)

    @override
    def on_train_epoch_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        super().on_train_epoch_start(trainer, module)
        self._add_epoch_task(trainer)

    def _add_epoch_task(self, trainer: Trainer) -> None:
        if self.is_terminal and trainer.is_global_zero:
            self._task = self._start().add_task(f"Epoch {trainer.current_epoch}", total=None, rate="0.0", metrics="")

    @override
    def _refresh(self, trainer: Trainer) -> None:
        if self.is_terminal:
            self._draw(trainer)
        else:
            super()._refresh(trainer)

    @override
    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        if not self.is_terminal:
            super().on_train_epoch_end(trainer, module)
        elif trainer.is_global_zero and self._task is not None:
            self._draw(trainer)

    @override
    def on_validation_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        if not self.is_terminal:
            super().on_validation_end(trainer, module)
        elif trainer.is_global_zero and not trainer.sanity_checking and trainer.state == "fit":
            metrics = {k: v for k, v in trainer.progress_bar_metrics.items() if not k.startswith("train")}
            if metrics:
                self._start().console.print(f"Validation (step {trainer.global_step}): {_fmt_metrics(metrics)}")

    def _stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    @override
    def on_train_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        self._stop()

    @override
    def on_exception(self, trainer: Trainer, module: TrainModule, exception: BaseException, /) -> None:
        self._stop()
