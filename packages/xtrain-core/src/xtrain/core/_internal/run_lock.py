"""One job at a time per run: an exclusive lock on the run's checkpoint directory while a fit of it runs.

Two jobs started with the same ``run_name`` (a resubmitted job while the first still runs, a copy-pasted launch
command) would otherwise both resume from and write into one directory: the second picks up the first's
checkpoint mid-training and the two overwrite each other's files. Global rank 0 holds an ``flock`` on a file in the
directory for the length of ``fit``; the operating system drops it when the process ends however it ends, so a
restart after a crash or a kill takes it again at once. Where the file system has no locks (some network file
systems), nothing is locked.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import IO, Any

from xtrain.core.errors import ConfigError

__all__ = ["RunLock"]

_FILE = ".xtrain-run.lock"


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
            holder = file.read().strip() or "another process"
            file.close()
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

    def release(self) -> None:
        """Let another job fit this run (closing the file drops the lock)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __getstate__(self) -> dict[str, Any]:
        """A Trainer pickled to spawned ranks carries no open lock (rank 0 takes its own)."""
        return {"_file": None}
