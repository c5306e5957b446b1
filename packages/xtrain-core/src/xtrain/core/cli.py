"""The ``xtrain`` command (its full version lives in ``xtrain.core._internal.cli``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xtrain.core._internal.cli.app import XtrainCLI
    from xtrain.core._internal.cli.save_config import SaveConfigCallback

__all__ = ["SaveConfigCallback", "XtrainCLI", "main"]


def __getattr__(name: str) -> Any:
    if name == "XtrainCLI":  # jsonargparse is imported only by those who use it
        from xtrain.core._internal.cli.app import XtrainCLI

        return XtrainCLI
    if name == "SaveConfigCallback":
        from xtrain.core._internal.cli.save_config import SaveConfigCallback

        return SaveConfigCallback
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from xtrain.core._internal.migrate.hints import missing_name_error  # a Lightning name gets a hint naming ours

    raise missing_name_error(sys.modules[__name__], name, sys._getframe(1))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``xtrain`` console script."""
    from xtrain.core._internal.cli import run

    return run(sys.argv[1:] if argv is None else argv)
