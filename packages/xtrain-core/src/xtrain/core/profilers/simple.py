"""Wall-clock time per action: a table of calls, mean and total time, and share of the stage."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

from typing_extensions import override

from xtrain.core.profilers.profiler import Profiler

__all__ = ["SimpleProfiler"]


class SimpleProfiler(Profiler):
    """Times every action with ``time.perf_counter`` (a few microseconds per action).

    The table lists each action's number of calls, mean and total seconds, and its share of the stage's wall time,
    slowest first. Actions nest (a hook inside ``[Stage]fit``), so shares add up to more than 100%.
    """

    @override
    def setup(self, *, stage: str, global_rank: int, log_dir: Path) -> None:
        super().setup(stage=stage, global_rank=global_rank, log_dir=log_dir)
        self.durations: defaultdict[str, list[float]] = defaultdict(list)
        self._open: defaultdict[str, list[float]] = defaultdict(list)
        self._began = time.perf_counter()

    @override
    def start(self, action: str) -> None:
        self._open[action].append(time.perf_counter())

    @override
    def stop(self, action: str) -> None:
        begun = self._open[action]
        if not begun:
            raise ValueError(f"profiler action {action!r} was stopped without being started")
        self.durations[action].append(time.perf_counter() - begun.pop())

    @override
    def summary(self) -> str:
        wall = max(time.perf_counter() - self._began, 1e-12)
        rows = sorted(((a, len(d), sum(d)) for a, d in self.durations.items()), key=lambda r: -r[2])
        width = max([len(a) for a, _, _ in rows] + [6])
        lines = [f"Profiler report ({self.stage}, rank {self.global_rank}): {wall:.3f} s wall",
                 f"{'Action':<{width}}  {'Calls':>8}  {'Mean (s)':>11}  {'Total (s)':>10}  {'Share':>7}"]
        lines += [f"{a:<{width}}  {n:>8}  {t / n:>11.6f}  {t:>10.4f}  {100 * t / wall:>6.1f}%" for a, n, t in rows]
        return "\n".join(lines)
