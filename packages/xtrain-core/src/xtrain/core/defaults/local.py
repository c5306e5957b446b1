"""The environment of processes on this machine (or started by hand on several), and of xtrain's own launchers."""

from __future__ import annotations

import os
import socket
from typing import ClassVar

from typing_extensions import override

from xtrain.core.environment import ClusterEnvironment

__all__ = ["LocalEnvironment", "find_free_port"]


def find_free_port() -> int:
    """A TCP port that is free on this host now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalEnvironment(ClusterEnvironment):
    """Ranks from xtrain's launchers or from ``NODE_RANK``/``MASTER_ADDR``/``MASTER_PORT`` set by hand.

    Used when no cluster manager is detected. xtrain's launchers set ``LOCAL_RANK`` in the processes they start,
    so a process that has it was started externally (by xtrain's launcher in a parent process, or by the user).
    """

    name: ClassVar[str] = "local"
    detect_priority: ClassVar[int | None] = 0

    def __init__(self) -> None:
        self._world_size = 1
        self._global_rank = 0

    @classmethod
    @override
    def detect(cls) -> bool:
        return True

    @property
    @override
    def creates_processes_externally(self) -> bool:
        return "LOCAL_RANK" in os.environ

    @property
    @override
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    @override
    def main_port(self) -> int:
        if "MASTER_PORT" not in os.environ:
            os.environ["MASTER_PORT"] = str(find_free_port())
        return int(os.environ["MASTER_PORT"])

    @override
    def world_size(self) -> int:
        return self._world_size

    @override
    def set_world_size(self, size: int) -> None:
        self._world_size = size

    @override
    def global_rank(self) -> int:
        return self._global_rank

    @override
    def set_global_rank(self, rank: int) -> None:
        self._global_rank = rank

    @override
    def local_rank(self) -> int:
        return int(os.environ.get("LOCAL_RANK", "0"))

    @override
    def node_rank(self) -> int:
        return int(os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", "0")))
