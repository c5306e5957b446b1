"""Atomic single-file checkpoints with ``torch.save`` / ``torch.load(weights_only=True)``."""

from __future__ import annotations

import os
import pickle
import tempfile
import zipfile
from pathlib import Path
from typing import Any, ClassVar

import torch
from typing_extensions import override

from xtrain.core._internal.progress_signal import ProgressFile
from xtrain.core.checkpoint_io import CheckpointIO, PathLike
from xtrain.core.errors import CheckpointError

__all__ = ["TorchCheckpointIO", "atomic_write", "read_checkpoint_file"]


def atomic_write(path: PathLike, write: Any) -> None:
    """Call ``write(file)`` on a temporary file beside ``path``, fsync it, and rename it over ``path``.

    A crash at any moment leaves either the old file or the new one at ``path``, never a partial one: the rename is
    atomic on POSIX file systems, and the fsync before it makes sure the bytes it points to are on disk. The
    directory is not fsynced after the rename: after a power loss the rename may be lost, which leaves the previous,
    intact checkpoint (a second fsync per save would cost more than the save itself on a busy disk).

    ``write`` gets a file that reports progress to the hang watchdog every 64 MiB, so a slow disk that keeps
    writing never counts as a hang.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(ProgressFile(f))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def read_checkpoint_file(path: PathLike, *, map_location: Any = "cpu") -> dict[str, Any]:
    """Load a ``torch.save`` file with ``weights_only=True``, turning every failure into a :class:`CheckpointError`."""
    file = Path(path)
    if not file.is_file():
        raise CheckpointError(f"checkpoint {str(file)!r} does not exist (or is not a file).")
    try:
        loaded = torch.load(file, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        reason = next((line.strip() for line in str(err).splitlines() if "Unsupported" in line), str(err)[:300])
        raise CheckpointError(
            f"checkpoint {str(file)!r} holds objects that are not plain tensors or containers, so it was refused "
            f"unread (weights_only=True) and nothing in it was executed ({reason}). If you wrote it yourself with "
            f"custom objects, store them as tensors, numbers, strings, lists or dicts instead."
        ) from None
    except (RuntimeError, zipfile.BadZipFile, EOFError, OSError) as err:
        raise CheckpointError(
            f"checkpoint {str(file)!r} is truncated or corrupted ({type(err).__name__}: {err}). "
            f"Resume from an earlier checkpoint."
        ) from None
    if not isinstance(loaded, dict):
        raise CheckpointError(f"checkpoint {str(file)!r} holds a {type(loaded).__name__}, not a checkpoint dict.")
    return loaded


class TorchCheckpointIO(CheckpointIO):
    """Writes one file per checkpoint atomically (temp file, fsync, rename); reads with ``weights_only=True``."""

    name: ClassVar[str] = "torch"

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike) -> None:
        atomic_write(path, lambda f: torch.save(checkpoint, f))

    @override
    def load_checkpoint(self, path: PathLike, *, map_location: Any = "cpu") -> dict[str, Any]:
        return read_checkpoint_file(path, map_location=map_location)

    @override
    def remove_checkpoint(self, path: PathLike) -> None:
        Path(path).unlink(missing_ok=True)

    @override
    def copy_checkpoint(self, source: PathLike, destination: PathLike) -> None:
        """A hard link under a temporary name, renamed over ``destination``: atomic and without a second write.

        Falls back to an atomic byte copy where hard links are not supported.
        """
        target = Path(destination)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.link")
        try:
            tmp.unlink(missing_ok=True)
            os.link(source, tmp)
            os.replace(tmp, target)
        except OSError:
            tmp.unlink(missing_ok=True)
            atomic_write(target, lambda f: f.write(Path(source).read_bytes()))
