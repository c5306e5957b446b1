"""Processes started by IBM Spectrum LSF's ``jsrun``."""

from __future__ import annotations

import os
import socket
from typing import ClassVar

from typing_extensions import override

from xtrain.core.environment import ClusterEnvironment
from xtrain.core.errors import ConfigError
from xtrain.strategies.environments._common import check_layout, env_int, port_from

__all__ = ["LSFEnvironment"]

_REQUIRED = ("LSB_JOBID", "LSB_DJOB_RANKFILE", "JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_SIZE")


class LSFEnvironment(ClusterEnvironment):
    """Ranks from ``JSM_NAMESPACE_*``; hosts from the rank file ``LSB_DJOB_RANKFILE`` (one line per slot).

    The first line of the rank file is the launch node, which runs no rank; the next host is the rendezvous host.
    """

    name: ClassVar[str] = "lsf"
    detect_priority: ClassVar[int | None] = 20

    @classmethod
    @override
    def detect(cls) -> bool:
        return all(name in os.environ for name in _REQUIRED)

    def _hosts(self) -> list[str]:
        path = os.environ["LSB_DJOB_RANKFILE"]
        try:
            with open(path) as f:
                lines = [line.strip() for line in f if line.strip()]
        except OSError as err:
            raise ConfigError("plugins", "lsf", f"cannot read the LSF rank file {path!r} ({err}).",
                              fix="run under jsrun, or pass another cluster environment.") from err
        if len(lines) < 2:
            raise ConfigError("plugins", "lsf", f"the LSF rank file {path!r} lists no compute host.",
                              fix="run under jsrun, or pass another cluster environment.")
        return lines[1:]

    @property
    @override
    def creates_processes_externally(self) -> bool:
        return True

    @property
    @override
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR") or self._hosts()[0]

    @property
    @override
    def main_port(self) -> int:
        if "MASTER_PORT" in os.environ:
            return int(os.environ["MASTER_PORT"])
        return port_from(f"lsf-{os.environ['LSB_JOBID']}")

    @override
    def world_size(self) -> int:
        return env_int("JSM_NAMESPACE_SIZE")

    @override
    def global_rank(self) -> int:
        return env_int("JSM_NAMESPACE_RANK")

    @override
    def local_rank(self) -> int:
        return env_int("JSM_NAMESPACE_LOCAL_RANK")

    @override
    def node_rank(self) -> int:
        order = list(dict.fromkeys(self._hosts()))
        host = socket.gethostname()
        return order.index(host) if host in order else 0

    @override
    def validate_settings(self, *, num_devices: int, num_nodes: int) -> None:
        hosts = self._hosts()
        order = list(dict.fromkeys(hosts))
        check_layout(who="LSF (jsrun)", per_node=hosts.count(order[0]), nodes=len(order), num_devices=num_devices,
                     num_nodes=num_nodes, per_node_flag="--tasks_per_rs", nodes_flag="--nrs")
