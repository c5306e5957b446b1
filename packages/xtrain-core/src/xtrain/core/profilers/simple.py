"""Wall-clock time per action: a table of calls, mean and total time, and share of the stage."""

from __future__ import annotations

import math
import os
import time
from collections import defaultdict
from pathlib import Path

from typing_extensions import override

from xtrain.core.profilers.profiler import Profiler

__all__ = ["SimpleProfiler"]


class SimpleProfiler(Profiler):
    """Times every action with ``time.perf_counter`` (a few microseconds per action).

    The table lists each action's number of calls, mean and total seconds, and its share of the stage's wall time,
    slowest first. Actions nest (a hook inside ``[Stage]fit``), so shares add up to more than 100%. The durations
    themselves are in :attr:`recorded_durations` (Lightning's name), one list of seconds per action, for the stage
    that ran last.

    The parameters may be passed by position in Lightning's order (``SimpleProfiler("perf", "report")``), a
    deliberate exception to xtrain's keyword-only rule so that Lightning code runs unchanged.

    Args:
        dirpath: Where reports go (default: the Trainer's ``log_dir``).
        filename: Write each rank's report to ``<dirpath>/<filename>-<stage>-rank<N>.txt`` instead of printing rank
            0's.
        extended: List calls and share too; ``False`` keeps the mean and total only, slowest mean first, as
            Lightning's short table.
    """

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None,
                 extended: bool = True) -> None:
        super().__init__(dirpath, filename)
        self.extended = extended
        self.recorded_durations: defaultdict[str, list[float]] = defaultdict(list)
        self._open: defaultdict[str, list[float]] = defaultdict(list)
        self._began = time.perf_counter()

    @override
    def setup(self, *, stage: str, global_rank: int, log_dir: Path) -> None:
        super().setup(stage=stage, global_rank=global_rank, log_dir=log_dir)
        self.recorded_durations = defaultdict(list)
        self._open = defaultdict(list)
        self._began = time.perf_counter()

    @override
    def start(self, action: str) -> None:
        self._open[action].append(time.perf_counter())

    @override
    def stop(self, action: str) -> None:
        end = time.perf_counter()
        begun = self._open[action]
        if not begun:
            raise ValueError(f"profiler action {action!r} was stopped without being started")
        self.recorded_durations[action].append(end - begun.pop())

    @override
    def summary(self) -> str:
        wall = max(time.perf_counter() - self._began, 1e-12)
        rows = [(a, len(d), math.fsum(d)) for a, d in self.recorded_durations.items() if d]
        width = max([len(a) for a, _, _ in rows] + [6])
        head = f"Profiler report ({self.stage}, rank {self.global_rank}): {wall:.3f} s wall"
        if not self.extended:
            rows.sort(key=lambda r: -r[2] / r[1])
            lines = [head, f"{'Action':<{width}}  {'Mean (s)':>11}  {'Total (s)':>10}"]
            return "\n".join(lines + [f"{a:<{width}}  {t / n:>11.6f}  {t:>10.4f}" for a, n, t in rows])
        rows.sort(key=lambda r: -r[2])
        lines = [head, f"{'Action':<{width}}  {'Calls':>8}  {'Mean (s)':>11}  {'Total (s)':>10}  {'Share':>7}"]
        lines += [f"{a:<{width}}  {n:>8}  {t / n:>11.6f}  {t:>10.4f}  {100 * t / wall:>6.1f}%" for a, n, t in rows]
        return "\n".join(lines)
