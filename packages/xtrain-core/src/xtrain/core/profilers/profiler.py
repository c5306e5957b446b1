"""The Profiler contract: timed *actions* (hooks, steps, whole stages) and a report at the end of each stage."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["Profiler"]


class Profiler(ABC):
    """Times actions named by the Trainer and reports them when a stage (``fit``, ``validate``...) ends.

    The Trainer names these actions: ``[Stage]fit``; ``training_step``, ``validation_step``, ``test_step``,
    ``predict_step``, ``backward``, ``optimizer_step``, ``batch_to_device`` (the strategy's work); and every hook
    that someone overrides, as ``[Callback]ModelCheckpoint.on_train_batch_end`` or
    ``[TrainModule]MyModel.on_validation_epoch_end``. Profile your own code with ``with profiler.profile("name"):``.

    Args:
        dirpath: Where reports go (default: the Trainer's ``log_dir``).
        filename: Write the report of every rank to ``<dirpath>/<filename>-<stage>-rank<N>.txt``; without it,
            global rank 0 prints its report.
    """

    def __init__(self, *, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None) -> None:
        self.dirpath = Path(dirpath) if dirpath is not None else None
        self.filename = filename
        self.global_rank = 0
        self.stage = "fit"

    @abstractmethod
    def start(self, action: str) -> None:
        """``action`` begins."""

    @abstractmethod
    def stop(self, action: str) -> None:
        """``action`` ends."""

    @abstractmethod
    def summary(self) -> str:
        """The report of what was recorded since :meth:`setup`."""

    @contextmanager
    def profile(self, action: str) -> Iterator[None]:
        """Time the ``with`` block as ``action``."""
        self.start(action)
        try:
            yield
        finally:
            self.stop(action)

    def setup(self, *, stage: str, global_rank: int, log_dir: Path) -> None:
        """A stage begins on this rank; reports go under ``log_dir`` unless ``dirpath`` was given."""
        self.stage, self.global_rank = stage, global_rank
        if self.dirpath is None:
            self.dirpath = Path(log_dir)

    def report_path(self) -> Path | None:
        """Where this rank's report is written, or ``None`` when rank 0 prints it."""
        if self.filename is None or self.dirpath is None:
            return None
        return self.dirpath / f"{self.filename}-{self.stage}-rank{self.global_rank}.txt"

    def teardown(self) -> None:
        """The stage ended: write (or print) the report."""
        text = self.summary()
        path = self.report_path()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        elif self.global_rank == 0:
            print(text)
