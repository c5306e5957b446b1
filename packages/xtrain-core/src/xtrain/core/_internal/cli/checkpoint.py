"""``xtrain checkpoint``: look inside checkpoints."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["add_checkpoint_actions", "checkpoint_parser", "run_checkpoint"]


def checkpoint_parser() -> Any:
    from jsonargparse import ArgumentParser

    return ArgumentParser(description="Inspect and convert xtrain checkpoints.")


def add_checkpoint_actions(parser: Any) -> None:
    """Add the actions (jsonargparse wants nested subcommands added after their parent is attached)."""
    from jsonargparse import ArgumentParser

    commands = parser.add_subcommands(dest="action")
    inspect = ArgumentParser(description="Print a checkpoint's manifest (how it was written) and its contents.")
    inspect.add_argument("path", type=str, help="A checkpoint file or sharded checkpoint directory.")
    commands.add_subcommand("inspect", inspect, help="print the manifest and the keys")


def run_checkpoint(cfg: Any) -> int:
    from xtrain.core.defaults.torch_io import read_checkpoint_file

    if cfg.action == "inspect":
        checkpoint = read_checkpoint_file(cfg.inspect.path)
        print(json.dumps({"manifest": checkpoint.get("xtrain", {}), "keys": sorted(checkpoint)}, indent=2))
        return 0
    return 2
