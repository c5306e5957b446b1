"""Doing something once per run rather than once per process: ``rank_zero_only`` and its messages.

The rank comes from the Trainer once it runs (it sets :attr:`rank_zero_only.rank`), and before that from the
launcher's environment variables (``RANK``, ``SLURM_PROCID``, ``LOCAL_RANK``), so module-level code in a script
started by ``torchrun`` is also right.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast

__all__ = ["rank_zero_debug", "rank_zero_info", "rank_zero_only", "rank_zero_print", "rank_zero_warn"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _rank_from_environment() -> int:
    for name in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        value = os.environ.get(name)
        if value is not None and value.isdigit():
            return int(value)
    return 0


class _RankZeroOnly:
    """Decorator: the function runs on global rank 0 and returns ``None`` elsewhere.

    Attributes:
        rank: The global rank of this process (set by the Trainer).
    """

    def __init__(self) -> None:
        self.rank = _rank_from_environment()

    def __call__(self, fn: _F) -> _F:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs) if self.rank == 0 else None

        return cast(_F, wrapped)


rank_zero_only = _RankZeroOnly()


def rank_zero_print(*args: Any, **kwargs: Any) -> None:
    """``print`` on global rank 0 only."""
    if rank_zero_only.rank == 0:
        print(*args, **kwargs)


def rank_zero_info(message: str) -> None:
    """Print an informational message on global rank 0 only."""
    rank_zero_print(message)


def rank_zero_debug(message: str) -> None:
    """Print a debug message on global rank 0 only, when ``XTRAIN_DEBUG`` is set."""
    if os.environ.get("XTRAIN_DEBUG"):
        rank_zero_print(message)


def rank_zero_warn(message: str | Warning, category: type[Warning] = UserWarning, stacklevel: int = 2) -> None:
    """``warnings.warn`` on global rank 0 only (one warning per run instead of one per process)."""
    if rank_zero_only.rank == 0:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
