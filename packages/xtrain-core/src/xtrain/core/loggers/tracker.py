"""The base of loggers that talk to an experiment tracker (W&B, MLflow): every call off the step loop.

The Trainer calls a logger from the training loop on global rank 0 only. A tracker's client can take milliseconds
per call (a socket to a service process, a database write), so :class:`TrackerLogger` queues each call on one
worker thread (:class:`~xtrain.core._internal.background.BackgroundWriter`) and returns at once. The run is opened
on that thread too, at the first call, so even the tracker's import and start-up cost the loop nothing.

A tracker call costs milliseconds of Python (protobuf, SQL) that would still compete with the loop for the GIL, so
metrics are batched: logged values wait in a list, and the worker sends everything that accumulated at most every
:attr:`TrackerLogger.flush_interval` seconds, in as few tracker calls as it allows (``save``, ``finalize`` and
checkpoints send at once).

Subclasses write the four ``_open``/``_write_*``/``_close`` methods, which always run on the worker thread, in
order.
"""

from __future__ import annotations

import os
import threading
import time
from abc import abstractmethod
from pathlib import Path
from typing import Any, Literal

from typing_extensions import override

from xtrain.core._internal.background import BackgroundWriter
from xtrain.core.errors import ConfigError
from xtrain.core.loggers.logger import Logger

__all__ = ["LogModel", "TrackerLogger"]

LogModel = bool | Literal["all"]
_STATUS = {"success": "success", "failed": "failed", "interrupted": "interrupted"}


class TrackerLogger(Logger):
    """A :class:`Logger` whose writes run on a worker thread.

    Attributes:
        flush_interval: Seconds between sends of batched metrics.

    Args:
        save_dir: Root directory of the local files (the tracker's own and, by default, the checkpoints).
        name: Experiment (or project) name.
        version: This run's local version (directory name under ``save_dir/name``).
        log_model: Upload checkpoints as artifacts: ``False`` (never), ``True`` (the checkpoints that still
            exist when the run ends) or ``"all"`` (each one as soon as it is saved).
    """

    flush_interval: float = 1.0

    def __init__(self, save_dir: str | os.PathLike[str] = ".", *, name: str = "xtrain_logs",
                 version: int | str | None = None, log_model: LogModel = False) -> None:
        super().__init__(save_dir, name=name, version=version)
        if log_model not in (True, False, "all"):
            raise ConfigError("log_model", log_model, "is not a log_model setting.", choices=[False, True, "all"],
                              fix="write log_model=True to upload the checkpoints when the run ends.")
        self._log_model = log_model
        self._writer = BackgroundWriter(f"xtrain-{type(self).__name__}")
        self._opened = False
        self._saved: dict[str, None] = {}
        self._pending: list[tuple[dict[str, float], int]] = []
        self._lock = threading.Lock()
        self._drain_queued = False
        self._urgent = threading.Event()
        self._last_send = 0.0

    # -- what subclasses write (called on the worker thread) --------------------------------------------------
    @abstractmethod
    def _open(self) -> None:
        """Start or resume the tracker's run."""

    @abstractmethod
    def _write_metrics(self, rows: list[tuple[dict[str, float], int]]) -> None:
        """Send ``(metrics, step)`` rows, oldest first."""

    @abstractmethod
    def _write_params(self, params: dict[str, Any]) -> None: ...

    @abstractmethod
    def _write_artifact(self, path: Path) -> None:
        """Upload the checkpoint at ``path`` (a file, or a sharded checkpoint's directory)."""

    @abstractmethod
    def _close(self, status: str) -> None:
        """End the run with ``status`` (``"success"``, ``"failed"`` or ``"interrupted"``)."""

    # -- the Logger interface: queue and return --------------------------------------------------------------
    def _submit(self, fn: Any, *args: Any) -> None:
        if not self._opened:
            self._opened = True
            self._writer.submit(self._open)
        self._writer.submit(fn, *args)

    @override
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Queue the values (under ``prefix-`` names when the logger has a ``prefix``)."""
        with self._lock:
            self._pending.append((self._add_prefix(metrics), step))
            queue, self._drain_queued = not self._drain_queued, True
        if queue:
            self._submit(self._drain)

    def _drain(self) -> None:
        """(Worker thread.) Wait out the flush interval unless a flush is urgent, then send what accumulated."""
        wait = self._last_send + self.flush_interval - time.monotonic()
        if wait > 0:
            self._urgent.wait(wait)
        with self._lock:
            rows, self._pending, self._drain_queued = self._pending, [], False
        if rows:
            self._write_metrics(rows)
        self._last_send = time.monotonic()

    @override
    def log_hyperparams(self, params: dict[str, Any]) -> None:
        self._submit(self._write_params, dict(params))

    @override
    def after_save_checkpoint(self, path: Path) -> None:
        if self._log_model == "all":
            self._submit(self._upload, Path(path))
        elif self._log_model:
            self._saved[str(path)] = None

    def _upload(self, path: Path) -> None:
        self._drain()  # the metrics logged before this checkpoint go first
        if path.exists():  # a checkpoint pruned (save_top_k) before its turn came is not uploaded
            self._write_artifact(path)

    @override
    def save(self) -> None:
        """Wait until everything queued has reached the tracker."""
        self._urgent.set()
        try:
            self._writer.flush()
        finally:
            self._urgent.clear()

    def _upload_kept(self) -> None:
        """Queue the uploads ``log_model=True`` kept for the end of the run (the checkpoints that still exist)."""
        if self._log_model is True:
            for path in map(Path, self._saved):
                if path.exists():
                    self._submit(self._upload, path)
            self._saved.clear()

    @override
    def finalize(self, status: str) -> None:
        self._upload_kept()
        if self._opened:
            self._writer.submit(self._close, _STATUS.get(status, "failed"))
            self._opened = False
        self._urgent.set()
        try:
            self._writer.close()
        finally:
            self._urgent.clear()

    def __getstate__(self) -> dict[str, Any]:
        """A logger sent to spawned processes carries no open run (the process that logs opens its own)."""
        state = {**self.__dict__, "_opened": False, "_drain_queued": False, "_pending": []}
        del state["_lock"], state["_urgent"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock(), _urgent=threading.Event())
