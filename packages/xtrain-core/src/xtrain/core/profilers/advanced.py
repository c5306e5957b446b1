"""cProfile per action: which functions each hook and step spends its time in."""

from __future__ import annotations

import cProfile
import io
import pstats
from pathlib import Path

from typing_extensions import override

from xtrain.core.profilers.profiler import Profiler

__all__ = ["AdvancedProfiler"]


class AdvancedProfiler(Profiler):
    """Runs ``cProfile`` while each action runs, one profile per action, and reports its top functions.

    Only one cProfile can be active at a time, so a nested action pauses the one around it: each action's profile
    holds its own time, not that of the actions inside it.

    Args:
        dirpath: Where reports go (default: the Trainer's ``log_dir``).
        filename: Write each rank's report to a file instead of printing rank 0's.
        line_count_restriction: Functions listed per action (by cumulative time).
    """

    def __init__(self, *, dirpath: str | None = None, filename: str | None = None,
                 line_count_restriction: int = 20) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.line_count_restriction = line_count_restriction

    @override
    def setup(self, *, stage: str, global_rank: int, log_dir: Path) -> None:
        super().setup(stage=stage, global_rank=global_rank, log_dir=log_dir)
        self.profiles: dict[str, cProfile.Profile] = {}
        self._stack: list[cProfile.Profile] = []

    @override
    def start(self, action: str) -> None:
        if self._stack:
            self._stack[-1].disable()
        profile = self.profiles.setdefault(action, cProfile.Profile())
        self._stack.append(profile)
        profile.enable()

    @override
    def stop(self, action: str) -> None:
        profile = self.profiles.get(action)
        if profile is None or not self._stack or self._stack[-1] is not profile:
            raise ValueError(f"profiler action {action!r} was stopped without being the innermost one started")
        self._stack.pop().disable()
        if self._stack:
            self._stack[-1].enable()

    @override
    def summary(self) -> str:
        parts = [f"Profiler report ({self.stage}, rank {self.global_rank})"]
        for action, profile in self.profiles.items():
            out = io.StringIO()
            stats = pstats.Stats(profile, stream=out)
            stats.strip_dirs().sort_stats("cumulative").print_stats(self.line_count_restriction)
            parts.append(f"Profile of {action}:\n{out.getvalue()}")
        return "\n".join(parts)
