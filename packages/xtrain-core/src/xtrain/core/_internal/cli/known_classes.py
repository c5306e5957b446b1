"""Making the lazily imported public classes known to the CLI, so YAML can name them by class name alone."""

from __future__ import annotations

import importlib

__all__ = ["import_public_classes"]

_PACKAGES = ("xtrain.core.callbacks", "xtrain.core.loggers")


def import_public_classes() -> None:
    """Import every name in the ``__all__`` of the callback and logger packages.

    jsonargparse resolves ``class_path: EMAWeightAveraging`` among the subclasses already imported; callbacks and
    loggers are imported on first use to keep ``import xtrain.core`` fast, so the CLI imports them here. A class whose
    optional library is missing is skipped (naming it by its full path then gives the library's own import error).
    """
    for package in _PACKAGES:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", ()):
            try:
                getattr(module, name)
            except ImportError:
                continue
