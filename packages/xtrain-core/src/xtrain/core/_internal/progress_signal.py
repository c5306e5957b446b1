"""The progress signal: what the loops, savers and strategies tell this rank's watchdog, at the price of a counter.

One per process, because a rank is a process. The step path only bumps integers and stores a constant string;
the watchdog thread (``_internal/watchdog.py``) samples them every half second and keeps all the clocks, so
reporting costs a few tens of nanoseconds and no allocation.

* :meth:`ProgressSignal.begin` marks the start of a loop (``"train"``, ``"validate"``...). The first step of each
  kind of loop in a process gets the larger first-step allowance (compilation, dataloader warm-up).
* :meth:`ProgressSignal.step` marks a finished step or evaluation batch.
* :meth:`ProgressSignal.report` marks any other advance (a chunk of a checkpoint written, a batch loaded).
* ``with PROGRESS.collective("all_reduce", tensor):`` wraps a collective xtrain calls (every strategy's, Horovod's
  too), so that a hang report can say which collective each rank last entered and whether it is still inside it.
  Under ``XTRAIN_COLLECTIVE_CHECK=1`` the same entry first compares the collective with every other rank's
  (:mod:`xtrain.core._internal.collective_check`); otherwise ``checker`` is ``None`` and costs one comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["PROGRESS", "ProgressFile", "ProgressSignal", "report_stream_writes"]


class ProgressSignal:
    """Counters the watchdog samples; see the module docstring."""

    __slots__ = ("_checked", "_next", "_tensor", "checker", "collective_name", "collectives", "count", "depth", "phase",
                 "phase_steps", "stepped", "steps")

    def __init__(self) -> None:
        self.count = 0
        self.steps = 0
        self.phase_steps = 0  # steps since the last begin(): the batch a hang report names in an evaluation
        self.phase = "setup"
        self.stepped = ""
        self.collectives = 0
        self.collective_name = ""
        self.depth = 0
        self._next = ""
        self._tensor: Any = None
        self._checked = True
        self.checker: Callable[[str, Any], None] | None = None

    def report(self) -> None:
        """Something advanced that is not a step: a checkpoint chunk written, a batch handed out, setup done."""
        self.count += 1

    def begin(self, phase: str) -> None:
        """A loop of kind ``phase`` starts; until its first step ends it runs under the first-step allowance."""
        self.phase = phase
        self.phase_steps = 0
        self.count += 1

    def step(self, phase: str) -> None:
        """A step (or evaluation batch) of kind ``phase`` finished."""
        self.phase = self.stepped = phase
        self.steps += 1
        self.phase_steps += 1
        self.count += 1

    def collective(self, name: str, tensor: Any = None, *, checked: bool = True) -> ProgressSignal:
        """Mark the collective about to run (``with PROGRESS.collective("barrier"): ...``); nesting keeps the outer name.

        Args:
            name: What the hang report and the collective check call it.
            tensor: The tensor it sends (its dtype and shape are compared by the collective check).
            checked: ``False`` for waits that ranks legitimately reach in different orders (Horovod's join serves
                the gradient all-reduces of ranks still training): the check skips them.
        """
        self._next = name
        self._tensor = tensor
        self._checked = checked
        return self

    def __enter__(self) -> None:
        if self.depth == 0:
            self.collectives += 1
            self.collective_name = self._next
        self.depth += 1
        if self.checker is not None and self._checked and self.depth == 1:
            tensor, self._tensor = self._tensor, None
            try:
                self.checker(self._next, tensor)
            except BaseException:
                self.depth -= 1  # __exit__ does not run when __enter__ raises
                raise
        self._tensor = None

    def __exit__(self, *exc: Any) -> None:
        self.depth -= 1


PROGRESS = ProgressSignal()


class ProgressFile:
    """A binary file that reports progress for every chunk written (checkpoints on a slow disk keep the run alive)."""

    CHUNK = 64 << 20

    def __init__(self, file: Any) -> None:
        self._file = file

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        for start in range(0, len(view), self.CHUNK):
            self._file.write(view[start:start + self.CHUNK])
            PROGRESS.report()
        return len(view)

    def flush(self) -> None:
        self._file.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def report_stream_writes(writer: Any) -> Any:
    """Make a ``torch.distributed.checkpoint`` ``FileSystemWriter`` report progress for every chunk it writes."""
    create = writer.fs.create_stream

    @contextmanager
    def create_stream(path: Any, mode: str) -> Iterator[Any]:
        with create(path, mode) as stream:
            yield ProgressFile(stream) if "w" in mode else stream

    writer.fs.create_stream = create_stream
    return writer
