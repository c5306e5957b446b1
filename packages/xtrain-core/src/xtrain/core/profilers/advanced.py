"""cProfile per action: which functions each hook and step spends its time in."""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import re
from pathlib import Path
from typing import Any

from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.core.profilers.profiler import Profiler

__all__ = ["AdvancedProfiler"]


class AdvancedProfiler(Profiler):
    """Runs ``cProfile`` while each action runs, one profile per action, and reports its functions.

    Only one cProfile can be active at a time, so a nested action pauses the one around it: each action's profile
    holds its own time, not that of the actions inside it.

    The parameters may be passed by position in Lightning's order (``AdvancedProfiler("perf", "adv")``), a
    deliberate exception to xtrain's keyword-only rule so that Lightning code runs unchanged.

    Args:
        dirpath: Where reports go (default: the Trainer's ``log_dir``).
        filename: Write each rank's report to ``<dirpath>/<filename>-<stage>-rank<N>.txt`` instead of printing rank
            0's.
        line_count_restriction: Functions listed per action, by cumulative time: a count (``20``) or a fraction
            below 1 (``0.1``: the top tenth). The default ``1.0`` lists them all, as Lightning's does: the report
            is long, and nothing is hidden.
        dump_stats: Also write each action's raw profile, for ``pstats``, snakeviz or gprof2dot, to
            ``<dirpath>/<filename>-<stage>-rank<N>-<action>.prof`` (``profile`` when there is no filename).
    """

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None,
                 line_count_restriction: float = 1.0, dump_stats: bool = False) -> None:
        super().__init__(dirpath, filename)
        if isinstance(line_count_restriction, bool) or not line_count_restriction > 0:
            raise ConfigError("line_count_restriction", line_count_restriction, "must be a positive count or fraction.",
                              fix="write line_count_restriction=20 (the top 20 functions) or 1.0 (all of them).")
        self.line_count_restriction = line_count_restriction
        self.dump_stats = dump_stats
        self.profiles: dict[str, cProfile.Profile] = {}
        self._stack: list[cProfile.Profile] = []

    @override
    def setup(self, *, stage: str, global_rank: int, log_dir: Path) -> None:
        super().setup(stage=stage, global_rank=global_rank, log_dir=log_dir)
        self.profiles = {}
        self._stack = []

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
        if not self.profiles:
            return ""
        parts = [f"Profiler report ({self.stage}, rank {self.global_rank})"]
        for action, profile in self.profiles.items():
            out = io.StringIO()
            stats = pstats.Stats(profile, stream=out)
            stats.strip_dirs().sort_stats("cumulative").print_stats(self.line_count_restriction)
            parts.append(f"Profile of {action}:\n{out.getvalue()}")
        return "\n".join(parts)

    def stats_path(self, action: str) -> Path:
        """Where ``dump_stats`` writes ``action``'s raw profile (characters a file name cannot hold become ``_``)."""
        assert self.dirpath is not None
        safe = re.sub(r"[\\/:*?\"<>|\s]+", "_", action)
        return self.dirpath / f"{self.filename or 'profile'}-{self.stage}-rank{self.global_rank}-{safe}.prof"

    @override
    def describe(self) -> None:
        if self.dump_stats and self.dirpath is not None:
            self.dirpath.mkdir(parents=True, exist_ok=True)
            for action, profile in self.profiles.items():
                profile.dump_stats(self.stats_path(action))
        super().describe()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its profiles (a ``cProfile.Profile`` cannot be), for launchers that pickle the Trainer."""
        state = dict(vars(self))
        state["profiles"], state["_stack"] = {}, []
        return state
