"""Launchers: how the processes of a run are started (re-executing the command, spawn, fork, Horovod's rendezvous)."""

from xtrain.strategies.launchers.horovod import HorovodLauncher
from xtrain.strategies.launchers.multiprocessing import ForkLauncher, MultiprocessingLauncher
from xtrain.strategies.launchers.subprocess_script import SubprocessScriptLauncher, reexec_command

__all__ = ["ForkLauncher", "HorovodLauncher", "MultiprocessingLauncher", "SubprocessScriptLauncher", "reexec_command"]
