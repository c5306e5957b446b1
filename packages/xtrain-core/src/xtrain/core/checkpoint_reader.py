"""Reading a checkpoint someone points xtrain at, without trusting it.

Every checkpoint read in xtrain (the Trainer's ``ckpt_path``, :meth:`Engine.load`, ``load_from_checkpoint``, the
``xtrain checkpoint`` commands) goes through :func:`read_checkpoint`. It never runs code from the file: full files
are unpickled with ``weights_only=True``; a sharded directory's pickled tensor metadata is read with an allowlist of
the classes it consists of; file names that leave the directory, symlinks and impossible sizes are refused. It
verifies the checksums written with the checkpoint before anything is used, and checks the manifest's types.
Whatever is wrong is a :class:`~xtrain.core.errors.CheckpointError` that names the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["read_checkpoint"]


def read_checkpoint(path: str | Path, *, template: Mapping[str, Any] | None = None, verify: bool = True,
                    map_location: Any = "cpu") -> dict[str, Any]:
    """Read a checkpoint file or sharded checkpoint directory into a dict, safely.

    Args:
        path: A checkpoint file (``torch.save`` zip archive) or a sharded checkpoint directory.
        template: Sharded directories only: a checkpoint-shaped dict of *fresh* tensors to read into (e.g. a copy
            of the local shards), so each rank reads only its slices. Other tensors are read whole.
        verify: Check the checksums written with the checkpoint first (the default). ``False`` skips it, for
            storage that verifies bytes itself.
        map_location: Where full files' tensors are loaded (as for ``torch.load``).

    Raises:
        CheckpointError: The checkpoint is missing, unreadable, corrupted, crafted, or its manifest is malformed.
    """
    from xtrain.core._internal.checkpoint_gate import read_checkpoint as read

    return read(path, template=template, verify=verify, map_location=map_location)
