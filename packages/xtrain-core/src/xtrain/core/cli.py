"""The ``xtrain`` command (its full version lives in ``xtrain.core._internal.cli``)."""

from __future__ import annotations

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``xtrain`` console script."""
    from xtrain.core._internal.cli import run

    return run(sys.argv[1:] if argv is None else argv)
