"""One job at a time per run: an exclusive lock on the run's checkpoint directory while a fit of it runs.

Two jobs started with the same ``run_name`` (a resubmitted job while the first still runs, a copy-pasted launch
command) would otherwise both resume from and write into one directory: the second picks up the first's
checkpoint mid-training and the two overwrite each other's files. Global rank 0 holds an ``flock`` on a file in the
directory for the length of ``fit``; the operating system drops it when the process ends however it ends, so a
restart after a crash or a kill takes it again at once. Where the file system has no locks (some network file
systems), nothing is locked.

An ``flock`` belongs to the open file, which a forked child (a DataLoader worker) shares: after a SIGKILL of the
trainer, an orphaned worker kept the lock until it noticed and exited, seconds later, and the restart was refused.
So every forked child closes its copy of the file right after the fork (``os.register_at_fork``); only the process
that took the lock holds it. (POSIX record locks are not inherited, but any ``close`` of the file in the process
drops them, and a second Trainer of the same process would not be refused.)
"""

from __future__ import annotations

import os
import socket
import time
import weakref
from pathlib import Path
from typing import IO, Any

from xtrain.core.errors import ConfigError

__all__ = ["RunLock"]

_FILE = ".xtrain-run.lock"
_HELD: weakref.WeakSet[RunLock] = weakref.WeakSet()  # the locks this process holds, for the fork hook


def _drop_in_child() -> None:
    """In a freshly forked child: close the inherited lock files (the parent keeps its own), so that the lock ends
    with the process that took it and not with the last of its workers."""
    for lock in list(_HELD):
        if lock._file is not None:
            try:
                lock._file.close()
            except OSError:  # pragma: no cover - closing a just-inherited descriptor does not fail
                pass
            lock._file = None
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_in_child)


def _holder_gone(holder: str) -> bool:
    """Whether the lock file names a process of this host that no longer runs (``pid N on HOST since ...``): then a
    process it started (a DataLoader worker, a subprocess) still holds the lock file open, not another job."""
    parts = holder.split()
    if len(parts) < 4 or parts[0] != "pid" or not parts[1].isdigit() or parts[2:4] != ["on", socket.gethostname()]:
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):  # alive under another user, or no such pid at all
        pass
    return False


class RunLock:
    """The lock one Trainer holds on its run's directory while fitting (see the module docstring)."""

    def __init__(self) -> None:
        self._file: IO[str] | None = None

    def acquire(self, directory: Path, run: str) -> None:
        """Lock ``directory`` for run ``run``; raise :class:`ConfigError` naming the job that holds it."""
        try:
            import fcntl
        except ImportError:  # not POSIX: no advisory locks to take
            return
        self.release()
        directory.mkdir(parents=True, exist_ok=True)
        file = (directory / _FILE).open("a+")
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            holder = file.read().strip()[:200] or "another process"
            file.close()
            if _holder_gone(holder):
                raise ConfigError("run_name", run, f"is locked ({directory / _FILE}), but the job that took the lock "
                                  f"({holder}) has ended: a process it started (a DataLoader worker, a subprocess) "
                                  f"still holds the lock file open.", fix="wait until that process ends (`fuser -v "
                                  "<lock file>` names it), then start this job again.") from None
            raise ConfigError("run_name", run, f"is being fitted by another job right now ({holder}; it holds "
                              f"{directory / _FILE}), and ckpt_path='auto' would resume from its checkpoints while it "
                              f"writes them.", fix="give this job another run_name, or wait until that job ends."
                              ) from None
        except OSError:  # no locks on this file system
            file.close()
            return
        file.seek(0)
        file.truncate()
        file.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        file.flush()
        self._file = file
        _HELD.add(self)

    def release(self) -> None:
        """Let another job fit this run (closing the file drops the lock)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        _HELD.discard(self)

    def __getstate__(self) -> dict[str, Any]:
        """A Trainer pickled to spawned ranks carries no open lock (rank 0 takes its own)."""
        return {"_file": None}
