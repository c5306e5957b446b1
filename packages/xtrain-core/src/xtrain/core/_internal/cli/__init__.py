"""The ``xtrain`` command line."""

from xtrain.core._internal.cli.main import run

__all__ = ["run"]
