"""Profilers: where the time of a run goes. ``Trainer(profiler="simple" | "advanced" | "pytorch" | Profiler())``.

Each is imported only when used. Without a profiler ``Trainer.profiler`` is a :class:`PassThroughProfiler`, as in
Lightning, so ``trainer.profiler.profile("name")`` always works; the Trainer then wraps nothing, so the step loop
pays nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xtrain.core._internal.lazy_names import lazy_getattr
from xtrain.core.profilers.profiler import PassThroughProfiler, Profiler

if TYPE_CHECKING:  # what type checkers see; at run time each is imported on first use (see _LAZY)
    from xtrain.core.profilers.advanced import AdvancedProfiler
    from xtrain.core.profilers.pytorch import PyTorchProfiler
    from xtrain.core.profilers.simple import SimpleProfiler

__all__ = ["AdvancedProfiler", "PassThroughProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler"]

_LAZY = {"SimpleProfiler": "simple", "AdvancedProfiler": "advanced", "PyTorchProfiler": "pytorch"}


__getattr__ = lazy_getattr(__name__, _LAZY)
