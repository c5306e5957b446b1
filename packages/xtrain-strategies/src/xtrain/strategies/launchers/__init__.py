"""Launchers: how the processes of a run are started (re-executing the command, spawn, fork, Horovod's rendezvous)."""

from __future__ import annotations

from typing import Literal

from xtrain.core.environment import ClusterEnvironment
from xtrain.core.launcher import Launcher
from xtrain.strategies.launchers.horovod import HorovodLauncher
from xtrain.strategies.launchers.multiprocessing import ForkLauncher, MultiprocessingLauncher
from xtrain.strategies.launchers.subprocess_script import SubprocessScriptLauncher, reexec_command

__all__ = ["ForkLauncher", "HorovodLauncher", "MultiprocessingLauncher", "SubprocessScriptLauncher", "launcher_for",
           "reexec_command"]


def launcher_for(start_method: Literal["popen", "spawn", "fork"], *, num_processes: int, num_nodes: int,
                 environment: ClusterEnvironment) -> Launcher:
    """The launcher of a process-per-device strategy for a DDP-style ``start_method``."""
    options = {"num_processes": num_processes, "num_nodes": num_nodes, "environment": environment}
    if start_method == "popen":
        return SubprocessScriptLauncher(**options)  # type: ignore[arg-type]
    if start_method == "fork":
        return ForkLauncher(**options)  # type: ignore[arg-type]
    return MultiprocessingLauncher(**options)  # type: ignore[arg-type]
