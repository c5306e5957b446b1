"""Atomic single-file checkpoints with ``torch.save`` / ``torch.load(weights_only=True)``, CRC-32 checked."""

from __future__ import annotations

import atexit
import errno
import itertools
import math
import os
import re
import shutil
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import torch
from typing_extensions import override

from xtrain.core._internal.background import BackgroundWriter
from xtrain.core._internal.progress_signal import ProgressFile
from xtrain.core.checkpoint_io import CheckpointIO, PathLike
from xtrain.core.errors import CheckpointError

__all__ = ["TorchCheckpointIO", "atomic_write", "checkpoint_bytes", "disk_full", "out_of_room", "read_checkpoint_file",
           "remove_stale_temporaries", "save_file", "torch_crc32"]

_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_COALESCE = 1 << 20  # torch.save's writes below this size reach the file (and the CRC) in one piece
_TEMPORARIES = itertools.count()
_TEMPORARY = re.compile(r"\..+\.(\d+)(?:-\d+\.tmp|(?:-\d+)?\.link)")
_UNFINISHED: weakref.WeakSet[TorchCheckpointIO] = weakref.WeakSet()


@atexit.register
def _finish_all() -> None:
    """Queued renames still happen when a script ends without tearing its Trainer down."""
    for io in list(_UNFINISHED):
        io.wait()


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
    publish(write_temporary(path, write, needed=needed), path, needed=needed)


def write_temporary(path: PathLike, write: Any, *, needed: Callable[[], int] | None = None) -> str:
    """The first half of :func:`atomic_write`: ``write(file)`` into a new temporary file beside ``path``; returns
    its name. Nothing is synced yet, so this is as fast as the page cache."""
    target = Path(path)
    if not target.parent.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = _create_temporary(target)
    try:
        with os.fdopen(fd, "wb") as f:
            write(ProgressFile(f))
    except BaseException as err:
        _discard(tmp_name, target, err, needed)
        interrupt = _interrupt_behind(err)
        if interrupt is not None:
            raise interrupt from None
        raise
    return tmp_name


def _interrupt_behind(err: BaseException) -> BaseException | None:
    """The KeyboardInterrupt (or SystemExit) that ``err`` was raised over, if any.

    Ctrl-C inside our stream's ``write`` leaves torch's zip writer half done, and its exit then raises "unexpected
    pos" over the interrupt: the caller must see the interrupt, as a plain ``torch.save`` would let it.
    """
    if not isinstance(err, Exception):
        return None  # the interrupt itself
    seen = err.__context__
    while isinstance(seen, Exception):
        seen = seen.__context__
    return seen


_SWEEP_EVERY_S = 120.0  # a folder's temporaries are looked at again after this (one scandir: free beside a save)


def remove_stale_temporaries(folder: Path, *, older_than: float = 60.0) -> list[str]:
    """Remove the temporary files of saves that were killed (``.<name>.<pid>-<n>.tmp``, ``.<name>.<pid>.link``):
    their process is gone from this host and they are over ``older_than`` seconds old. Each is as large as a
    checkpoint and nothing else would ever remove them. Returns the names removed."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        match = _TEMPORARY.fullmatch(entry.name)
        if match is None or int(match.group(1)) == os.getpid() or _alive(int(match.group(1))):
            continue
        try:
            if entry.is_file(follow_symlinks=False) and now - entry.stat(follow_symlinks=False).st_mtime > older_than:
                os.unlink(entry.path)
                removed.append(entry.name)
        except OSError:
            continue
    return removed


def _alive(pid: int) -> bool:
    """Whether ``pid`` may be a live process here (only "no such process" says it is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        pass
    return True


def _create_temporary(target: Path) -> tuple[int, str]:
    """A new file ``.<name>.<pid>-<n>.tmp`` beside ``target``, opened for writing; what ``tempfile.mkstemp`` does,
    without its random names (a tenth of a millisecond per save): the process id and a counter are unique enough,
    and ``O_EXCL`` never opens a file that is already there. Its mode is what ``open`` gives (``0o666`` less the
    umask), as ``torch.save`` and the sharded files have, not ``mkstemp``'s private ``0o600``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    while True:
        name = str(target.with_name(f".{target.name}.{os.getpid()}-{next(_TEMPORARIES)}.tmp"))
        try:
            return os.open(name, flags, 0o666), name
        except FileExistsError:
            continue


def publish(tmp_name: str, path: PathLike, *, needed: Callable[[], int] | None = None) -> None:
    """The second half of :func:`atomic_write`: fsync the temporary file, then rename it over ``path``."""
    target = Path(path)
    try:
        fd = os.open(tmp_name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp_name, target)
    except BaseException as err:
        _discard(tmp_name, target, err, needed)
        raise


def _discard(tmp_name: str, target: Path, err: BaseException, needed: Callable[[], int] | None) -> None:
    """Remove a temporary file after ``err``; a full disk becomes the :class:`CheckpointError` that says so."""
    written = Path(tmp_name).stat().st_size if Path(tmp_name).exists() else 0
    Path(tmp_name).unlink(missing_ok=True)
    if out_of_room(err):
        raise disk_full(target, err, max(needed() if needed is not None else 0, written)) from err


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


def save_file(obj: Any, path: PathLike, *, checksums: bool = True,
              finish: BackgroundWriter | None = None) -> tuple[int, int]:
    """``torch.save`` ``obj`` atomically to ``path``; returns ``(crc32, size)`` of the bytes written.

    With ``checksums`` the archive is sealed with the CRC-32 of its bytes, computed as they are written
    (:func:`~xtrain.core._internal.integrity.seal_zip`); torch's own, slower per-record CRC is off either way.
    With ``finish``, the bytes are written here but the fsync and the rename onto ``path`` are queued on that
    writer (``path`` appears when it has run them).
    """
    from xtrain.core._internal.integrity import HashingStream, seal_zip

    written: list[tuple[int, int]] = []

    def write(f: Any) -> None:
        hashed = HashingStream(f, coalesce=_COALESCE)
        with torch_crc32(enabled=False):
            torch.save(obj, hashed)  # type: ignore[arg-type]
        hashed.finish()
        if checksums:
            seal_zip(f, hashed)
        written.append((hashed.crc, hashed.size))

    needed = lambda: checkpoint_bytes(obj)  # noqa: E731
    tmp_name = write_temporary(path, write, needed=needed)
    if finish is None:
        publish(tmp_name, path, needed=needed)
    else:
        finish.submit(publish, tmp_name, path)
    return written[-1]


@contextmanager
def torch_crc32(*, enabled: bool) -> Iterator[None]:
    """Set torch.save's per-record CRC-32 (a global setting of torch >= 2.5) for the block.

    The setting is written and put back directly: torch's ``config.patch`` costs about 15 us more, at every save.
    """
    try:
        import torch.utils.serialization

        options: Any = torch.utils.serialization.config.save
        before = options.compute_crc32
    except (ImportError, AttributeError):
        before = enabled
    if before == enabled:
        yield
        return
    options.compute_crc32 = enabled
    try:
        yield
    finally:
        options.compute_crc32 = before


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

    The bytes are written in the caller's thread (training changes the tensors right after), but the fsync and the
    rename run on a background thread, in order with the copies and removals that follow, because waiting for the
    disk would stall every epoch of a short-epoch run. :meth:`settle` and :meth:`wait` (called before every load, at
    teardown, at exit, and by ``Trainer.save_checkpoint``) return when the files are in place. A crash before that leaves the previous
    checkpoint, as a crash during a synchronous save would.

    Args:
        checksums: Store the CRC-32 of the file's bytes (computed as they are written) and check it before a load;
            a flipped byte is then a :class:`CheckpointError` naming the file. ``False`` skips both (for storage
            that verifies bytes itself).
    """

    name: ClassVar[str] = "torch"

    def __init__(self, *, checksums: bool = True) -> None:
        self.checksums = checksums
        self._finisher = BackgroundWriter("xtrain-checkpoint-sync")
        self._swept: dict[Path, float] = {}  # folder -> when its killed saves' temporaries were last removed
        _UNFINISHED.add(self)

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike) -> None:
        self.wait()  # one save in flight at most; a failure of the previous one is raised here
        folder, now = Path(path).parent, time.monotonic()
        if now - self._swept.get(folder, -math.inf) > _SWEEP_EVERY_S:  # a kill just before a resume leaves young ones
            self._swept[folder] = now
            remove_stale_temporaries(folder)
        save_file(checkpoint, path, checksums=self.checksums, finish=self._finisher)

    @override
    def load_checkpoint(self, path: PathLike, *, map_location: Any = "cpu") -> dict[str, Any]:
        self.wait()
        return read_checkpoint_file(path, map_location=map_location, verify=self.checksums)

    @override
    def remove_checkpoint(self, path: PathLike) -> None:
        self._finisher.submit(Path(path).unlink, True)

    @override
    def copy_checkpoint(self, source: PathLike, destination: PathLike) -> None:
        self._finisher.submit(self._copy_now, source, destination)

    @override
    def wait(self) -> None:
        self._finisher.flush()

    @override
    def settle(self) -> None:
        self._finisher.flush()

    @override
    def teardown(self) -> None:
        """Finish the queued syncs and renames, then stop their thread (a later save starts a new one).

        A process that runs many fits (a sweep, a test suite) would otherwise keep one idle thread per fit.
        """
        self._finisher.close()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        _UNFINISHED.add(self)

    @staticmethod
    def _copy_now(source: PathLike, destination: PathLike) -> None:
        """A hard link under a temporary name, renamed over ``destination``: atomic and without a second write.

        Falls back to an atomic byte copy where hard links are not supported.
        """
        target = Path(destination)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}-{next(_TEMPORARIES)}.link")
        try:
            tmp.unlink(missing_ok=True)
            os.link(source, tmp)
            os.replace(tmp, target)
        except OSError:
            tmp.unlink(missing_ok=True)
            atomic_write(target, lambda f: f.write(Path(source).read_bytes()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(checksums={self.checksums})"
