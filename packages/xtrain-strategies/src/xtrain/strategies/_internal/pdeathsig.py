"""Tying a child process's life to its parent's (Linux ``prctl(PR_SET_PDEATHSIG)``, through ctypes).

When the parent dies, even by SIGKILL, the kernel sends the child SIGKILL, so no rank outlives the process that
started it. On other systems the functions do nothing and the fail-fast watchdog is the only guard.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from functools import cache
from typing import Any

__all__ = ["die_with_parent", "preexec_die_with_parent"]

_PR_SET_PDEATHSIG = 1


@cache
def _prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """Make the kernel send ``sig`` to this process when its parent exits; exit now if it already has."""
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def preexec_die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen`` that calls :func:`die_with_parent` in the child before exec.

    ctypes is resolved here, in the parent, so the child only makes one system call between fork and exec.
    """
    _prctl()
    parent = os.getpid()
    return lambda: die_with_parent(parent)
