"""Output directories are checked before a run starts, not at its first save an epoch later.

A directory that is read-only, on a read-only file system, or a file in the way is found only when the first
checkpoint or log line is written, after a whole epoch, as a raw ``OSError``. Here each directory a run will write
to is probed first (a file created and removed in it, or in its nearest existing parent when it does not exist
yet, since it will be created there), and a failure is a :class:`ConfigError` naming the argument and the path.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

__all__ = ["check_output_dirs", "check_writable"]


def check_writable(argument: str, path: Path) -> None:
    """Raise :class:`ConfigError` unless ``path`` is (or can be created as) a directory this process can write to."""
    probe_in = path
    while not probe_in.exists():
        if probe_in.parent == probe_in:
            break
        probe_in = probe_in.parent
    if not probe_in.is_dir():
        what = "is a file" if probe_in == path else f"cannot be created: {str(probe_in)!r} is a file"
        raise ConfigError(argument, str(path), f"{what}, not a directory.", fix="pass a directory path.")
    try:
        fd, probe = tempfile.mkstemp(prefix=".xtrain-write-probe-", dir=probe_in)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        where = "" if probe_in == path else f" (it would be created in {str(probe_in)!r})"
        raise ConfigError(argument, str(path), f"is not writable{where}: {err.strerror or err}.",
                          fix="pass a directory you can write to, or fix its permissions.") from None


def check_output_dirs(trainer: Trainer, *, fitting: bool) -> None:
    """Probe the directories the run writes to: loggers' ``save_dir``, and when ``fitting`` every
    ``ModelCheckpoint(dirpath=...)`` and ``default_root_dir`` where checkpoints go by default."""
    root = Path(trainer.default_root_dir)
    dirs: dict[Path, str] = {}
    checkpoints = trainer.checkpoint_callbacks if fitting else []
    if any(cb.dirpath is None for cb in checkpoints) and not trainer.loggers:
        dirs[root] = "default_root_dir"
    for logger in trainer.loggers:
        save_dir = getattr(logger, "save_dir", None)
        if isinstance(save_dir, (str, os.PathLike)):
            path = Path(save_dir)
            dirs.setdefault(path, "default_root_dir" if path == root else f"{type(logger).__name__}(save_dir=...)")
    for callback in checkpoints:
        if callback.dirpath is not None:
            dirs.setdefault(Path(callback.dirpath), "ModelCheckpoint(dirpath=...)")
    for path, argument in dirs.items():
        check_writable(argument, path)
