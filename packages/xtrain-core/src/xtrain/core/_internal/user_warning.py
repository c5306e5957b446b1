"""Warnings attributed to the user's line: the innermost frame outside xtrain.

A fixed ``stacklevel`` points into xtrain wherever the warning is raised from a loop or a registry several calls
deep; the user's ``Trainer(...)``, ``trainer.fit(...)`` or ``engine.backward(loss)`` line is the one to show.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

__all__ = ["warn_at_user"]


def _internal(frame: Any) -> bool:
    module = frame.f_globals.get("__name__", "")
    return bool(module == "xtrain" or module.startswith(("xtrain.", "importlib")))


def warn_at_user(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` attributed to the innermost frame outside xtrain: the user's line that led here."""
    frame = sys._getframe(0)
    level = 1
    while frame.f_back is not None and _internal(frame):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
