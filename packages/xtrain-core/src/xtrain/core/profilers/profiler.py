"""The Profiler contract: timed *actions* (hooks, steps, whole stages) and a report at the end of each stage."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from typing_extensions import override

__all__ = ["PassThroughProfiler", "Profiler"]


class Profiler(ABC):
    """Times actions named by the Trainer and reports them when a stage (``fit``, ``validate``...) ends.

    The Trainer names these actions: ``[Stage]fit``; ``training_step``, ``validation_step``, ``test_step``,
    ``predict_step``, ``backward``, ``optimizer_step``, ``batch_to_device`` (the strategy's work); and every hook
    that someone overrides, as ``[Callback]ModelCheckpoint.on_train_batch_end`` or
    ``[TrainModule]MyModel.on_validation_epoch_end``. Profile your own code with ``with profiler.profile("name"):``.

    ``dirpath`` and ``filename`` may be passed by position, as Lightning's profilers take them: a deliberate
    exception to xtrain's keyword-only rule, so that ``SimpleProfiler("perf", "report")`` written for Lightning runs.

    Args:
        dirpath: Where reports go (default: the Trainer's ``log_dir``).
        filename: Write the report of every rank to ``<dirpath>/<filename>-<stage>-rank<N>.txt``; without it,
            global rank 0 prints its report.
    """

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None) -> None:
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

    def summary(self) -> str:
        """The report of what was recorded since :meth:`setup`; empty by default, as Lightning's, so that a profiler
        written for Lightning with only ``start`` and ``stop`` works here too."""
        return ""

    @contextmanager
    def profile(self, action: str) -> Iterator[str]:
        """Time the ``with`` block as ``action`` (the block receives the name, as Lightning's does)."""
        self.start(action)
        try:
            yield action
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

    def describe(self) -> None:
        """Write this rank's report to :meth:`report_path`, or print it on global rank 0.

        The Trainer calls it at the end of every stage (through :meth:`teardown`); call it yourself, as with
        Lightning's, to see the report of a profiler used outside a Trainer. An empty summary writes nothing.
        """
        text = self.summary()
        if not text:
            return
        path = self.report_path()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        elif self.global_rank == 0:
            print(text)

    def teardown(self) -> None:
        """The stage ended: :meth:`describe` it."""
        self.describe()


class PassThroughProfiler(Profiler):
    """Records nothing: ``Trainer.profiler`` when no profiler is set, as in Lightning.

    It exists so that ``with self.trainer.profiler.profile("name"):`` in a module runs whether or not profiling is
    on. The Trainer recognises this exact class and skips profiling altogether (no hook or step is wrapped), so the
    step loop costs what it costs without profiling support; a subclass is treated as a real profiler.
    """

    @override
    def start(self, action: str) -> None:
        pass

    @override
    def stop(self, action: str) -> None:
        pass
