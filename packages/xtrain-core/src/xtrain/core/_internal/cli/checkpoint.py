"""``xtrain checkpoint``: look inside checkpoints, and turn sharded ones into one file."""

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
    consolidate = ArgumentParser(description="Write a sharded checkpoint (a directory written by every rank, e.g. "
                                 "under strategy='fsdp') as one file that plain torch.load(weights_only=True) reads. "
                                 "No process group or GPU is needed.")
    consolidate.add_argument("src", type=str, help="The sharded checkpoint directory.")
    consolidate.add_argument("dst", type=str, help="The file to write.")
    commands.add_subcommand("consolidate", consolidate, help="turn a sharded checkpoint into one file")


def run_checkpoint(cfg: Any) -> int:
    from xtrain.core._internal.checkpoint_gate import inspect_checkpoint
    from xtrain.core.sharded_checkpoint import consolidate

    if cfg.action == "inspect":
        manifest, keys = inspect_checkpoint(cfg.inspect.path)
        print(json.dumps({"manifest": manifest, "keys": keys}, indent=2))
        return 0
    if cfg.action == "consolidate":
        manifest = consolidate(cfg.consolidate.src, cfg.consolidate.dst)
        print(f"wrote {cfg.consolidate.dst} (one file, trained by {manifest.get('strategy')!r} on "
              f"{manifest.get('world_size')} rank(s)); load it with torch.load(path, weights_only=True) or "
              f"ckpt_path={cfg.consolidate.dst!r}")
        return 0
    return 2
