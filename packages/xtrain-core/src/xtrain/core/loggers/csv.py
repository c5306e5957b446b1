"""Metrics to a CSV file, written through on every call (by default) so a crash loses nothing."""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path
from typing import IO, Any

from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.core.loggers.logger import Logger, PathStr
from xtrain.core.rank_zero import rank_zero_only

__all__ = ["CSVExperimentWriter", "CSVLogger"]

_COUNTERS = ("step", "epoch")


def _whole_counters(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with a whole-numbered ``step``/``epoch`` as an int, both as logged (``1.0``) and as read (``"1.0"``).

    The Trainer logs ``epoch`` as a float metric; Lightning's file reads ``0`` there and scripts parse the column
    with ``int()``. Rows kept on resume are rewritten the same way, so one file never mixes ``0.0`` and ``0``.
    """
    out = dict(row)
    for key in _COUNTERS:
        value = out.get(key)
        if isinstance(value, str) and value.endswith(".0") and value[:-2].lstrip("-").isdigit():
            out[key] = value[:-2]
        elif isinstance(value, float) and value.is_integer():
            out[key] = int(value)
    return out


class CSVExperimentWriter:
    """What ``CSVLogger.experiment`` returns: the writer of one run's files, as Lightning's ``ExperimentWriter``.

    Scripts written for Lightning call ``logger.experiment.log_metrics(...)``, ``.log_hparams(...)``, ``.save()`` or
    read ``.metrics_file_path``/``.log_dir``; each goes to the logger's own files (no prefix is added here, as in
    Lightning, where the prefix belongs to the logger).

    Args:
        logger: The :class:`CSVLogger` whose files this writes.
    """

    NAME_HPARAMS_FILE = "hparams.yaml"
    NAME_METRICS_FILE = "metrics.csv"

    def __init__(self, logger: CSVLogger) -> None:
        self._logger = logger

    @property
    def log_dir(self) -> PathStr:
        return self._logger.log_dir

    @property
    def metrics_file_path(self) -> str:
        return str(self._logger.metrics_file)

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """The rows logged but not yet written (``flush_logs_every_n_steps`` > 1)."""
        return self._logger._buffer

    @property
    def hparams(self) -> dict[str, Any]:
        """Every hyperparameter recorded so far (later calls win per key)."""
        return self._logger._hparams

    def log_metrics(self, metrics_dict: dict[str, float], step: int | None = None) -> None:
        """Record one row; ``step`` defaults to the number of rows logged so far."""
        self._logger._log_row(metrics_dict, self._logger._rows if step is None else step)

    def log_hparams(self, params: dict[str, Any]) -> None:
        """Merge ``params`` into the recorded hyperparameters and rewrite ``hparams.yaml``/``hparams.json``."""
        self._logger.log_hyperparams(params)

    def save(self) -> None:
        """Write the buffered rows to ``metrics.csv``."""
        self._logger._flush()


class CSVLogger(Logger):
    """Writes ``metrics.csv`` (one row per logged step), ``hparams.yaml`` and ``hparams.json`` to :attr:`log_dir`.

    By default rows are appended as they come, each passed to the operating system at once (a crash of the process
    loses none); the file stays open between rows (opening it per row cost ~0.1 ms of the training thread) and is
    rewritten only when a new metric name adds a column. Columns are in alphabetical order, as Lightning writes
    them.

    Args:
        save_dir: Root directory of all runs.
        name: Experiment name, a sub-directory of ``save_dir``.
        version: A fixed version (an int becomes ``version_N``, a str is used as the directory name).
        prefix: Put ``prefix-`` before every metric name, as Lightning's ``prefix``.
        flush_logs_every_n_steps: Keep rows in memory and write them when the logged step reaches the next multiple
            of this number (and at ``save``, at the end of each stage and at each checkpoint). ``1`` (the default)
            writes every row at once, so a crash loses nothing; Lightning's default is 100, which a crash can cost
            up to 100 steps of rows.
    """

    _FILE = "metrics.csv"

    def __init__(self, save_dir: str | Path = ".", name: str = "xtrain_logs",
                 version: int | str | None = None, *, prefix: str = "",
                 flush_logs_every_n_steps: int = 1) -> None:  # positional, as Lightning's: Logger("logs", "exp")
        super().__init__(save_dir, name=name, version=version)
        if type(flush_logs_every_n_steps) is not int or flush_logs_every_n_steps < 1:
            raise ConfigError("flush_logs_every_n_steps", flush_logs_every_n_steps, "is not a positive number of "
                              "steps.", fix="write flush_logs_every_n_steps=1 to write every row at once.")
        self._prefix = prefix
        self._flush_every = flush_logs_every_n_steps
        self._next_flush: int | None = None  # the step at which the buffered rows are written
        self._buffer: list[dict[str, Any]] = []
        self._columns: list[str] | None = None
        self._rows = 0
        self._file: IO[str] | None = None
        self._writer: csv.DictWriter[str] | None = None
        self._experiment: CSVExperimentWriter | None = None
        self._started = False  # a metrics.csv found at the first write is an earlier run's, unless this one resumed

    @property
    def metrics_file(self) -> Path:
        return self.log_dir / self._FILE

    @property
    def experiment(self) -> CSVExperimentWriter:
        """The run's writer (Lightning's ``ExperimentWriter``): ``log_metrics``, ``log_hparams``, ``save``,
        ``metrics_file_path`` and ``log_dir``."""
        if self._experiment is None:
            self._experiment = CSVExperimentWriter(self)
        return self._experiment

    def _read(self) -> tuple[list[str], list[dict[str, str]]]:
        if not self.metrics_file.is_file():
            return [], []
        with self.metrics_file.open(newline="") as f:
            reader = csv.DictReader(f)
            return list(reader.fieldnames or []), list(reader)

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = self._writer = None

    def _rewrite(self, columns: list[str], rows: list[dict[str, Any]]) -> None:
        self._close()
        self.metrics_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.metrics_file.with_suffix(".csv.tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(_whole_counters(row) for row in rows)
        tmp.replace(self.metrics_file)
        self._columns = columns

    @override
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._log_row(self._add_prefix(metrics), step)

    def _log_row(self, metrics: dict[str, Any], step: int) -> None:
        self._buffer.append(_whole_counters({"step": step, **metrics}))
        self._rows += 1
        if self._next_flush is None:
            self._next_flush = (step // self._flush_every + 1) * self._flush_every
        if self._flush_every == 1 or step + 1 >= self._next_flush:
            self._flush()

    def _flush(self) -> None:
        """Write the buffered rows: appended through the open file, or the file rewritten when a column is new."""
        rows, self._buffer, self._next_flush = self._buffer, [], None
        if not rows:
            return
        if not self._started:
            self._started = True
            self._replace_earlier_run()
        if self._columns is None:
            self._columns = self._read()[0] or ["step"]
        new = list(dict.fromkeys(k for row in rows for k in row if k not in self._columns))
        if new or (self._file is None and not self.metrics_file.is_file()):
            _, kept = self._read()
            self._rewrite(sorted([*self._columns, *new]), [*kept, *rows])  # sorted, as Lightning's columns
            return
        if self._file is None or self._writer is None:
            self._file = self.metrics_file.open("a", newline="")
            self._writer = csv.DictWriter(self._file, fieldnames=self._columns)
        self._writer.writerows(rows)
        self._file.flush()

    def _replace_earlier_run(self) -> None:
        """A new run in a version directory that already holds a ``metrics.csv`` (``version=0`` given twice) starts
        the file afresh, as Lightning's: appending would mix two runs' rows under the same steps."""
        if self.metrics_file.is_file() and self.metrics_file.stat().st_size:
            warnings.warn(f"CSVLogger: {str(self.log_dir)!r} already holds an earlier run's metrics.csv; this run "
                          f"replaces it (as Lightning's CSVLogger). Give each run its own version (leave version "
                          f"out to take the next free one) to keep both.", UserWarning, stacklevel=4)
            self._rewrite(["step"], [])

    @override
    def save(self) -> None:
        """Write the rows still buffered (``flush_logs_every_n_steps`` > 1)."""
        self._flush()

    @override
    def finalize(self, status: str) -> None:
        super().finalize(status)
        self._close()

    @override
    def log_hyperparams(self, params: dict[str, Any]) -> None:
        """Write ``hparams.yaml`` (as Lightning's CSVLogger; ``load_from_checkpoint(hparams_file=...)`` reads it) and
        ``hparams.json`` (xtrain 1.0's file) to :attr:`log_dir`.

        Each call adds to what earlier calls recorded (a value given again replaces the old one), as in Lightning:
        ``logger.log_hyperparams({"batch": 32})`` before ``fit`` is kept beside the module's hyperparameters that
        ``fit`` logs.
        """
        from xtrain.core._internal.hparams_file import plain_hparams

        merged = self._write_hparams_file(params)
        (self.log_dir / "hparams.json").write_text(json.dumps(plain_hparams(merged), indent=2))

    @override
    def state_dict(self) -> dict[str, Any]:
        self._flush()  # the checkpoint's row count must be what the file holds
        return {**super().state_dict(), "rows": self._rows}

    def __getstate__(self) -> dict[str, Any]:
        """Pickled to spawned workers without the open file (each process opens its own when it logs) and without
        the rows this process still has to write (its own ``save``/``finalize`` writes them)."""
        return {**self.__dict__, "_file": None, "_writer": None, "_buffer": [], "_next_flush": None,
                "_experiment": None}

    @override
    def resume_problems(self, state: dict[str, Any]) -> list[str]:
        rows = state.get("rows", 0)
        bad = [] if type(rows) is int and rows >= 0 else [f"rows {rows!r} is not a number of rows"]
        return super().resume_problems(state) + bad

    @override
    def resume(self, state: dict[str, Any], *, step: int) -> None:
        """Keep exactly the rows written before the checkpoint (steps can repeat, e.g. epoch-end metrics).

        Every rank takes the checkpoint's version (the run's directories are named after it); global rank 0 alone,
        the rank that writes the file, rewrites it (two ranks renaming one temporary file over it raced).
        """
        self._flush()
        self._started = True  # the rows before the checkpoint are this run's
        super().resume(state, step=step)
        if rank_zero_only.rank != 0:
            return
        columns, rows = self._read()
        if not self.continues(state):
            self._rows = len(rows)
            return
        self._rows = int(state.get("rows", len(rows)))
        if columns:
            self._rewrite(columns, rows[: self._rows])
