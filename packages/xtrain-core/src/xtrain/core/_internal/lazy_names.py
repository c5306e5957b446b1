"""The module ``__getattr__`` of xtrain's public packages: names imported on first use, and a missing name answered
with a hint when Lightning has it (``from xtrain.core.callbacks import TQDMProgressBar`` names xtrain's progress bar).

Lazy names keep ``import xtrain.core`` fast (optional integrations are imported only when used); the hint's table is
imported only on a miss. ``xtrain.core`` itself writes the same function out, so that its import loads no module of
``_internal``.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["lazy_getattr"]


def lazy_getattr(module: str, lazy: Mapping[str, str], *, package: str | None = None) -> Callable[[str], Any]:
    """The ``__getattr__`` for ``module``.

    Args:
        module: The public module's ``__name__``.
        lazy: Each lazy name and the submodule of ``package`` that defines it.
        package: Where those submodules live (``module`` itself by default).
    """
    where = package or module

    def __getattr__(name: str) -> Any:
        submodule = lazy.get(name)
        if submodule is None:
            if name.startswith("_"):
                raise AttributeError(f"module {module!r} has no attribute {name!r}")
            from xtrain.core._internal.migrate.hints import missing_name_error

            raise missing_name_error(sys.modules[module], name, sys._getframe(1))
        return getattr(importlib.import_module(f"{where}.{submodule}"), name)

    return __getattr__
