"""The xtrain command line (grows subcommands as packages land)."""

from __future__ import annotations

import argparse

from xtrain.core.__about__ import __version__

__all__ = ["run"]


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="xtrain", description="Train PyTorch models anywhere by changing arguments.")
    parser.add_argument("--version", action="version", version=f"xtrain-core {__version__}")
    parser.parse_args(argv)
    parser.print_help()
    return 0
