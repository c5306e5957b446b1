"""Making the lazily imported public classes known to the CLI, so YAML can name them by class name alone."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["import_public_classes"]

_PACKAGES = ("xtrain.core.callbacks", "xtrain.core.loggers", "xtrain.core.profilers")


def import_public_classes() -> dict[str, Any]:
    """Import every name in the ``__all__`` of the callback, logger and profiler packages; returns the classes.

    jsonargparse resolves ``class_path: EMAWeightAveraging`` among the subclasses already imported; callbacks and
    loggers are imported on first use to keep ``import xtrain.core`` fast, so the CLI imports them here. A class whose
    optional library is missing is skipped (naming it by its full path then gives the library's own import error).
    """
    found: dict[str, Any] = {}
    for package in _PACKAGES:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", ()):
            try:
                value = getattr(module, name)
            except ImportError:
                continue
            if isinstance(value, type):
                found.setdefault(name, value)
    return found
