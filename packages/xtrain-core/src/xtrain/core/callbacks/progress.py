"""A progress bar without dependencies: a refreshed line on a terminal, plain lines elsewhere."""

from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING, Any, ClassVar, TextIO

from typing_extensions import override

from xtrain.core.callbacks.callback import Callback

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["ProgressBar"]


def _fmt_metrics(metrics: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items()))


def _fmt_time(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class ProgressBar(Callback):
    """Epoch, step, throughput, ETA and the ``prog_bar`` metrics, refreshed at most every ``refresh_interval``.

    On a terminal one line is rewritten in place; otherwise (CI logs, files) a line is printed per epoch and at most
    every ``log_interval`` seconds, so logs stay readable.

    Args:
        refresh_interval: Seconds between refreshes on a terminal.
        log_interval: Seconds between lines when the output is not a terminal.
        stream: Where to write (default ``sys.stderr``).
    """

    reads_gradients: ClassVar[bool] = False

    def __init__(self, *, refresh_interval: float = 0.2, log_interval: float = 30.0, stream: TextIO | None = None) -> None:
        self.refresh_interval = refresh_interval
        self.log_interval = log_interval
        self._stream = stream
        self._last = 0.0
        self._epoch_start = 0.0
        self._first_batch = 0
        self._terminal: bool | None = None
        self._interval: float | None = None

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    @property
    def is_terminal(self) -> bool:
        """Whether the stream is a terminal (looked up once per epoch, not per batch)."""
        if self._terminal is None:
            isatty = getattr(self.stream, "isatty", None)
            self._terminal = bool(isatty and isatty())
        return self._terminal

    def _line(self, trainer: Trainer) -> str:
        p = trainer._progress
        total = trainer.num_training_batches
        done = p.batches_in_epoch
        elapsed = max(time.monotonic() - self._epoch_start, 1e-9)
        rate = (done - self._first_batch) / elapsed
        remaining = (total - done) / rate if rate > 0 and math.isfinite(total) else math.inf
        epochs = "" if trainer.max_epochs == -1 else f"/{trainer.max_epochs - 1}"  # 0-based both, as Lightning
        count = f"{done}/{total}" if math.isfinite(total) else f"{done}"
        metrics = _fmt_metrics(trainer.progress_bar_metrics)
        return (f"Epoch {p.epoch}{epochs} {count} step {p.global_step} [{rate:.1f} it/s, "
                f"elapsed {_fmt_time(elapsed)}, eta {_fmt_time(remaining)}] {metrics}").rstrip()

    def _write(self, text: str, *, in_place: bool) -> None:
        stream = self.stream
        stream.write(f"\r{text}\x1b[K" if in_place else f"{text}\n")
        stream.flush()

    @override
    def on_train_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        # A run resumed mid-epoch starts without on_train_epoch_start (as in Lightning): time from here.
        self._start_epoch_clock(trainer)

    @override
    def on_train_epoch_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        self._start_epoch_clock(trainer)

    def _start_epoch_clock(self, trainer: Trainer) -> None:
        self._terminal = self._interval = None
        self._epoch_start = self._last = time.monotonic()
        self._first_batch = trainer._progress.batches_in_epoch

    @override
    def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any,
                           batch_idx: int, /) -> None:
        # Called after every step: one clock read and one comparison unless a refresh is due.
        now = time.monotonic()
        interval = self._interval
        if interval is None:
            interval = self._interval = self.refresh_interval if self.is_terminal else self.log_interval
        if now - self._last < interval or not trainer.is_global_zero:
            return
        self._last = now
        self._refresh(trainer)

    def _refresh(self, trainer: Trainer) -> None:
        """Show the current state (subclasses draw differently); called at most every refresh interval."""
        self._write(self._line(trainer), in_place=self.is_terminal)

    @override
    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        if trainer.is_global_zero:
            self._write(self._line(trainer), in_place=self.is_terminal)
            if self.is_terminal:
                self.stream.write("\n")

    @override
    def on_validation_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        if trainer.is_global_zero and not trainer.sanity_checking and trainer.state == "fit":
            metrics = {k: v for k, v in trainer.progress_bar_metrics.items() if not k.startswith("train")}
            if metrics and not self.is_terminal:
                self._write(f"Validation (step {trainer.global_step}): {_fmt_metrics(metrics)}", in_place=False)
