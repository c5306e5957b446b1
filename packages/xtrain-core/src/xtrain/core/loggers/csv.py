"""Metrics to a CSV file, written through on every call so a crash loses nothing."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import IO, Any

from typing_extensions import override

from xtrain.core.loggers.logger import Logger

__all__ = ["CSVLogger"]

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


class CSVLogger(Logger):
    """Writes ``metrics.csv`` (one row per logged step), ``hparams.yaml`` and ``hparams.json`` to :attr:`log_dir`.

    Rows are appended as they come, each passed to the operating system at once (a crash of the process loses
    none); the file stays open between rows (opening it per row cost ~0.1 ms of the training thread) and is
    rewritten only when a new metric name adds a column.
    """

    _FILE = "metrics.csv"

    def __init__(self, save_dir: str | Path = ".", name: str = "xtrain_logs",
                 version: int | str | None = None) -> None:  # positional, as Lightning's: Logger("logs", "exp")
        super().__init__(save_dir, name=name, version=version)
        self._columns: list[str] | None = None
        self._rows = 0
        self._file: IO[str] | None = None
        self._writer: csv.DictWriter[str] | None = None

    @property
    def metrics_file(self) -> Path:
        return self.log_dir / self._FILE

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
        row = _whole_counters({"step": step, **metrics})
        self._rows += 1
        if self._columns is None:
            self._columns = self._read()[0] or ["step"]
        new = [k for k in row if k not in self._columns]
        if new or (self._file is None and not self.metrics_file.is_file()):
            _, rows = self._read()
            self._rewrite([*self._columns, *new], [*rows, row])
            return
        if self._file is None or self._writer is None:
            self._file = self.metrics_file.open("a", newline="")
            self._writer = csv.DictWriter(self._file, fieldnames=self._columns)
        self._writer.writerow(row)
        self._file.flush()

    @override
    def finalize(self, status: str) -> None:
        super().finalize(status)
        self._close()

    @override
    def log_hyperparams(self, params: dict[str, Any]) -> None:
        """Write ``hparams.yaml`` (as Lightning's CSVLogger; ``load_from_checkpoint(hparams_file=...)`` reads it) and
        ``hparams.json`` (xtrain 1.0's file) to :attr:`log_dir`."""
        from xtrain.core._internal.hparams_file import plain_hparams, write_hparams_yaml

        write_hparams_yaml(self.log_dir / "hparams.yaml", params)
        (self.log_dir / "hparams.json").write_text(json.dumps(plain_hparams(params), indent=2))

    @override
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "rows": self._rows}

    def __getstate__(self) -> dict[str, Any]:
        """Pickled to spawned workers without the open file (each process opens its own when it logs)."""
        return {**self.__dict__, "_file": None, "_writer": None}

    @override
    def resume_problems(self, state: dict[str, Any]) -> list[str]:
        rows = state.get("rows", 0)
        bad = [] if type(rows) is int and rows >= 0 else [f"rows {rows!r} is not a number of rows"]
        return super().resume_problems(state) + bad

    @override
    def resume(self, state: dict[str, Any], *, step: int) -> None:
        """Keep exactly the rows written before the checkpoint (steps can repeat, e.g. epoch-end metrics)."""
        super().resume(state, step=step)
        columns, rows = self._read()
        if not self.continues(state):
            self._rows = len(rows)
            return
        self._rows = int(state.get("rows", len(rows)))
        if columns:
            self._rewrite(columns, rows[: self._rows])
