"""Connecting a Profiler to a run: which profiler a setting names, and what gets timed.

Nothing here runs without a profiler: the Trainer enters :func:`profiling` and builds a profiled
:class:`~xtrain.core._internal.hooks.HookDispatcher` only when ``profiler`` is set, so an unprofiled step loop calls
exactly what it called before.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xtrain.core.errors import ConfigError
from xtrain.core.profilers.profiler import Profiler

if TYPE_CHECKING:
    from xtrain.core.strategy import Strategy

__all__ = ["PROFILER_NAMES", "profiled", "profiling", "resolve_profiler"]

PROFILER_NAMES = ("simple", "advanced", "pytorch")
_TIMED_STRATEGY_METHODS = ("batch_to_device", "backward", "optimizer_step")


def resolve_profiler(value: object) -> Profiler | None:
    """The Profiler that ``Trainer(profiler=value)`` names (``None``: no profiling)."""
    if value is None or isinstance(value, Profiler):
        return value
    if value == "simple":
        from xtrain.core.profilers.simple import SimpleProfiler

        return SimpleProfiler()
    if value == "advanced":
        from xtrain.core.profilers.advanced import AdvancedProfiler

        return AdvancedProfiler()
    if value == "pytorch":
        from xtrain.core.profilers.pytorch import PyTorchProfiler

        return PyTorchProfiler()
    raise ConfigError("profiler", value, "is not a profiler.", choices=[*PROFILER_NAMES, "a Profiler instance", None],
                      fix='write profiler="simple" (a wall-clock table per hook and step).')


def profiled(profiler: Profiler, action: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, timed as ``action`` on every call."""

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        profiler.start(action)
        try:
            return fn(*args, **kwargs)
        finally:
            profiler.stop(action)

    return timed


@contextmanager
def profiling(profiler: Profiler, strategy: Strategy, *, stage: str, global_rank: int, log_dir: Path) -> Iterator[None]:
    """Time the stage, the strategy's steps, backward and optimizer steps; report when the stage ends.

    The strategy's methods are replaced on this instance only, for the duration of the stage.
    """
    profiler.setup(stage=stage, global_rank=global_rank, log_dir=log_dir)
    run_step = strategy.run_step

    def run_step_timed(name: str, *args: Any, **kwargs: Any) -> Any:
        profiler.start(name)
        try:
            return run_step(name, *args, **kwargs)  # type: ignore[arg-type]
        finally:
            profiler.stop(name)

    replaced = {name: profiled(profiler, name, getattr(strategy, name)) for name in _TIMED_STRATEGY_METHODS}
    replaced["run_step"] = run_step_timed
    vars(strategy).update(replaced)
    try:
        with profiler.profile(f"[Stage]{stage}"):
            yield
    finally:
        for name in replaced:
            vars(strategy).pop(name, None)
        profiler.teardown()
