"""The ``xtrain`` command (its full version lives in ``xtrain.core._internal.cli``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from xtrain.core._internal.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from xtrain.core._internal.cli.app import XtrainCLI
    from xtrain.core._internal.cli.plateau import ReduceLROnPlateau
    from xtrain.core._internal.cli.save_config import SaveConfigCallback

__all__ = ["ReduceLROnPlateau", "SaveConfigCallback", "XtrainCLI", "main"]


# jsonargparse is imported only by those who use the CLI classes.
__getattr__ = lazy_getattr(__name__, {"XtrainCLI": "app", "SaveConfigCallback": "save_config",
                                      "ReduceLROnPlateau": "plateau"},
                           package="xtrain.core._internal.cli")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``xtrain`` console script."""
    from xtrain.core._internal.cli import run

    return run(sys.argv[1:] if argv is None else argv)
