"""Profilers: where the time of a run goes. ``Trainer(profiler="simple" | "advanced" | "pytorch" | Profiler())``.

Each is imported only when used. Without a profiler ``Trainer.profiler`` is a :class:`PassThroughProfiler`, as in
Lightning, so ``trainer.profiler.profile("name")`` always works; the Trainer then wraps nothing, so the step loop
pays nothing.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from xtrain.core.profilers.profiler import PassThroughProfiler, Profiler

__all__ = ["AdvancedProfiler", "PassThroughProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler"]

_LAZY = {"SimpleProfiler": "simple", "AdvancedProfiler": "advanced", "PyTorchProfiler": "pytorch"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"xtrain.core.profilers.{_LAZY[name]}"), name)
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from xtrain.core._internal.migrate.hints import missing_name_error  # a Lightning name gets a hint naming ours

    raise missing_name_error(sys.modules[__name__], name, sys._getframe(1))
