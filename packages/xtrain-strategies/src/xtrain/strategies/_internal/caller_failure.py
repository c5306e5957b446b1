"""Telling the launcher that the process the user started (rank 0) failed, shared by the re-exec strategies."""

from __future__ import annotations

from xtrain.core.launcher import Launcher
from xtrain.strategies.launchers import SubprocessScriptLauncher

__all__ = ["report_caller_failure"]


def report_caller_failure(launcher: Launcher | None, error: BaseException) -> None:
    """End the ranks a :class:`SubprocessScriptLauncher` started instead of waiting for them; others: nothing to do."""
    if isinstance(launcher, SubprocessScriptLauncher):
        launcher.caller_failed(error)
