"""Atomic single-file checkpoints with ``torch.save`` / ``torch.load(weights_only=True)``, CRC-32 checked."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, ClassVar

import torch
from typing_extensions import override

from xtrain.core._internal.progress_signal import ProgressFile
from xtrain.core.checkpoint_io import CheckpointIO, PathLike
from xtrain.core.errors import CheckpointError

__all__ = ["TorchCheckpointIO", "atomic_write", "checkpoint_bytes", "disk_full", "out_of_room", "read_checkpoint_file", "save_file", "torch_crc32"]

_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def atomic_write(path: PathLike, write: Any, *, needed: Callable[[], int] | None = None) -> None:
    """Call ``write(file)`` on a temporary file beside ``path``, fsync it, and rename it over ``path``.

    A crash at any moment leaves either the old file or the new one at ``path``, never a partial one: the rename is
    atomic on POSIX file systems, and the fsync before it makes sure the bytes it points to are on disk. The
    directory is not fsynced after the rename: after a power loss the rename may be lost, which leaves the previous,
    intact checkpoint (a second fsync per save would cost more than the save itself on a busy disk).

    ``write`` gets a file that reports progress to the hang watchdog every 64 MiB, so a slow disk that keeps
    writing never counts as a hang.

    A full disk is a :class:`CheckpointError` naming ``path`` and the bytes needed (``needed()``, or what was written
    when it failed); the temporary file is removed and ``path`` keeps its previous content.
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
    except BaseException as err:
        written = Path(tmp_name).stat().st_size if Path(tmp_name).exists() else 0
        Path(tmp_name).unlink(missing_ok=True)
        if out_of_room(err):
            raise disk_full(target, err, max(needed() if needed is not None else 0, written)) from err
        raise


def out_of_room(err: Any) -> bool:
    """Whether ``err`` (or what caused it) is a full disk or quota."""
    # torch's zip writer turns the OSError of a failed write into a RuntimeError (the OSError is its context); DCP
    # collects each rank's error in a CheckpointException's ``failures``.
    while isinstance(err, BaseException):
        if isinstance(err, OSError) and err.errno in _NO_ROOM:
            return True
        failures = getattr(err, "failures", None)
        if isinstance(failures, dict) and any(out_of_room(f[0] if isinstance(f, tuple) else f)
                                              for f in failures.values()):
            return True
        err = err.__cause__ or err.__context__
    return False


def disk_full(target: Path, err: BaseException, needed: int) -> CheckpointError:
    """The error for a save that ran out of room: the path, the bytes it needed, and that the previous one is kept."""
    free = shutil.disk_usage(target.parent if target.parent.exists() else Path.cwd()).free
    return CheckpointError(
        f"saving the checkpoint {str(target)!r} failed: the disk is full ({type(err).__name__}: {str(err)[:200]}). "
        f"It needs about {needed} bytes ({needed / 2**20:.1f} MiB); {free} bytes are free there. The previous "
        f"checkpoint at that path is unchanged. Free space, or set ModelCheckpoint(dirpath=...) to a larger disk.")


def save_file(obj: Any, path: PathLike, *, checksums: bool = True) -> tuple[int, int]:
    """``torch.save`` ``obj`` atomically to ``path``; returns ``(crc32, size)`` of the bytes written.

    With ``checksums`` the archive is sealed with the CRC-32 of its bytes, computed as they are written
    (:func:`~xtrain.core._internal.integrity.seal_zip`); torch's own, slower per-record CRC is off either way.
    """
    from xtrain.core._internal.integrity import HashingStream, seal_zip

    written: list[tuple[int, int]] = []

    def write(f: Any) -> None:
        hashed = HashingStream(f)
        with torch_crc32(enabled=False):
            torch.save(obj, hashed)  # type: ignore[arg-type]
        if checksums:
            seal_zip(f, hashed)
        written.append((hashed.crc, hashed.size))

    atomic_write(path, write, needed=lambda: checkpoint_bytes(obj))
    return written[-1]


def torch_crc32(*, enabled: bool) -> AbstractContextManager[Any]:
    """Set torch.save's per-record CRC-32 (a global setting of torch >= 2.5)."""
    try:
        import torch.utils.serialization

        config: Any = torch.utils.serialization.config
        if config.save.compute_crc32 == enabled:
            return nullcontext()
    except (ImportError, AttributeError):
        return nullcontext()
    return config.patch({"save.compute_crc32": enabled})  # type: ignore[no-any-return]


def checkpoint_bytes(checkpoint: Any) -> int:
    """The bytes of the tensors in ``checkpoint`` (what a save writes, give or take a few kilobytes)."""
    from xtrain.core.sharded_checkpoint import split_tensors

    tensors = split_tensors({"": checkpoint})[0]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors.values()}
    return sum(storages.values()) + 4096


def read_checkpoint_file(path: PathLike, *, map_location: Any = "cpu", verify: bool = True) -> dict[str, Any]:
    """Load a ``torch.save`` file through the checkpoint gate: CRC-32s checked, then ``weights_only=True``."""
    from xtrain.core._internal.checkpoint_gate import read_full_file

    return read_full_file(path, verify=verify, map_location=map_location)


class TorchCheckpointIO(CheckpointIO):
    """Writes one file per checkpoint atomically (temp file, fsync, rename); reads with ``weights_only=True``.

    Args:
        checksums: Store the CRC-32 of the file's bytes (computed as they are written) and check it before a load;
            a flipped byte is then a :class:`CheckpointError` naming the file. ``False`` skips both (for storage
            that verifies bytes itself).
    """

    name: ClassVar[str] = "torch"

    def __init__(self, *, checksums: bool = True) -> None:
        self.checksums = checksums

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike) -> None:
        save_file(checkpoint, path, checksums=self.checksums)

    @override
    def load_checkpoint(self, path: PathLike, *, map_location: Any = "cpu") -> dict[str, Any]:
        return read_checkpoint_file(path, map_location=map_location, verify=self.checksums)

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

    def __repr__(self) -> str:
        return f"{type(self).__name__}(checksums={self.checksums})"
