"""Profilers: where the time of a run goes. ``Trainer(profiler="simple" | "advanced" | "pytorch" | Profiler())``.

Each is imported only when used; with no profiler the Trainer wraps nothing, so the step loop pays nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

from xtrain.core.profilers.profiler import Profiler

__all__ = ["AdvancedProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler"]

_LAZY = {"SimpleProfiler": "simple", "AdvancedProfiler": "advanced", "PyTorchProfiler": "pytorch"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"xtrain.core.profilers.{_LAZY[name]}"), name)
    raise AttributeError(name)
