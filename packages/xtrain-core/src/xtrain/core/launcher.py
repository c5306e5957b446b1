"""The Launcher contract: starting the other processes.

A strategy chooses its launcher. The Trainer and the Engine only call :meth:`Launcher.launch`; they never ask which
kind it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

__all__ = ["Launcher"]


class Launcher(ABC):
    """Starts the processes of a run and runs a function in each.

    Attributes:
        interactive_compatible: Whether it works from a notebook or REPL (fork does, re-executing a script does not).
        runs_in_caller: ``True`` when the calling process becomes rank 0 (re-exec); ``False`` when it only waits
            for workers (spawn, fork) and must receive rank 0's results to stay in sync.
        supports_restarts: Whether it can end and restart the whole group after a failure (``max_restarts``).
        max_restarts: How many times to restart (set from ``Trainer(max_restarts=...)`` before :meth:`launch`).
        run_name: The run's explicit name (set from ``Trainer(run_name=...)`` with :attr:`max_restarts`), so that a
            restarting launcher names the run its ranks use rather than an id of its own.
    """

    interactive_compatible: ClassVar[bool] = False
    runs_in_caller: ClassVar[bool] = True
    supports_restarts: ClassVar[bool] = False
    max_restarts: int = 0
    run_name: str | None = None

    def check(self) -> None:
        """Raise :class:`~xtrain.core.errors.ConfigError` if this launcher cannot work here (called before launching)."""

    @abstractmethod
    def launch(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` on every rank and return rank 0's result in the calling process."""
