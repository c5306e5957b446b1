"""A run that fails before its first optimizer step leaves no ``version_N`` directory behind.

The directories a run's loggers create are noted when logging starts; when the run then fails at step 0 (in the
sanity check or the first step), the ones it created are removed again, so the next run does not skip a version
number and nobody looks for logs in an empty directory.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from xtrain.core.loggers.logger import Logger

__all__ = ["new_log_dirs", "remove_empty_log_dirs", "remove_log_dirs"]


def new_log_dirs(loggers: Iterable[Logger]) -> list[Path]:
    """The directories this run creates for its logs: each ``version_N`` it claims now
    (:meth:`~xtrain.core.loggers.logger.Logger.claim_version`), and for a version given, restored or named, the
    highest directory on the logger's ``log_dir`` path (below ``save_dir``) that does not exist yet. Never the root
    above a claimed version: a run started beside this one may have claimed the next."""
    found = []
    for logger in loggers:
        claimed = logger.claim_version()
        if claimed is not None:
            found.append(claimed)
            continue
        log_dir = Path(logger.log_dir)
        missing = [p for p in (log_dir.parent, log_dir) if not p.exists()]
        if missing and Path(logger.save_dir) in log_dir.parents:
            found.append(missing[0])
    return found


def remove_empty_log_dirs(dirs: Iterable[Path]) -> None:
    """Remove the directories a successful run created but wrote nothing into (a ``predict`` that logs nothing): as in
    Lightning, whose loggers create them at their first write."""
    for path in dirs:
        try:
            path.rmdir()  # only when empty
        except OSError:
            pass


def remove_log_dirs(dirs: Iterable[Path]) -> None:
    """Remove directories a failed run created; anything holding checkpoints is left alone."""
    for path in dirs:
        if path.is_dir() and not any(p.suffix == ".ckpt" or p.name == "checkpoints" for p in path.rglob("*")):
            shutil.rmtree(path, ignore_errors=True)
