"""Connecting a Profiler to a run: which profiler a setting names, and what gets timed.

Nothing here runs without a profiler: ``Trainer.profiler`` is then a
:class:`~xtrain.core.profilers.PassThroughProfiler` (so ``trainer.profiler.profile(...)`` works in user code, as in
Lightning), and the Trainer enters :func:`profiling` and builds a profiled
:class:`~xtrain.core._internal.hooks.HookDispatcher` only when :func:`active_profiler` gives a profiler, so an
unprofiled step loop calls exactly what it called before.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xtrain.core.errors import ConfigError
from xtrain.core.profilers.profiler import PassThroughProfiler, Profiler

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

__all__ = ["PROFILER_NAMES", "active_profiler", "profiled", "profiling", "resolve_profiler"]

PROFILER_NAMES = ("simple", "advanced", "pytorch")
_TIMED_STRATEGY_METHODS = ("batch_to_device", "backward", "optimizer_step")


def resolve_profiler(value: object) -> Profiler:
    """The Profiler that ``Trainer(profiler=value)`` names (``None``: a :class:`PassThroughProfiler`)."""
    if value is None:
        return PassThroughProfiler()
    if isinstance(value, Profiler):
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


def active_profiler(profiler: Profiler | None) -> Profiler | None:
    """``profiler``, or ``None`` when it records nothing (the default :class:`PassThroughProfiler` itself, not a
    subclass that may record): the Trainer then skips all profiling work, so the default costs nothing per step."""
    return None if profiler is None or type(profiler) is PassThroughProfiler else profiler


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
def profiling(profiler: Profiler, trainer: Trainer, *, stage: str) -> Iterator[None]:
    """Time the stage, the strategy's steps, backward and optimizer steps; report when the stage ends.

    The strategy's methods are replaced on this instance only, for the duration of the stage.
    """
    from xtrain.core.profilers.pytorch import PyTorchProfiler

    strategy = trainer.strategy
    if isinstance(profiler, PyTorchProfiler):
        profiler.bind_run(trainer.module, _stage_steps(trainer, stage))
    profiler.setup(stage=stage, global_rank=trainer.global_rank, log_dir=Path(trainer.log_dir))
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


def _stage_steps(trainer: Trainer, stage: str) -> float:
    """The steps ``stage`` runs, which tell the PyTorch profiler whether its default window fits: per epoch when
    fitting, as Lightning counts them, and no more than ``max_steps``."""
    if stage == "fit":
        steps = float(trainer.num_training_batches)
        max_steps = getattr(trainer, "max_steps", -1)
        return min(steps, float(max_steps)) if isinstance(max_steps, int) and max_steps > 0 else steps
    counts = {"validate": trainer.num_val_batches, "test": trainer.num_test_batches,
              "predict": trainer.num_predict_batches}.get(stage, [])
    return float(sum(counts))
