"""Processes started by ``horovodrun --gloo`` (or by xtrain's own Horovod launcher).

Horovod's Gloo launcher gives every process its place in ``HOROVOD_*`` variables: ``RANK``/``SIZE`` (global),
``LOCAL_RANK``/``LOCAL_SIZE`` (on this host) and ``CROSS_RANK``/``CROSS_SIZE`` (this host among the hosts). Reading
them needs no Horovod import, so detection stays cheap. ``horovodrun --mpi`` and plain ``mpirun`` set Open MPI's
variables instead and are detected as ``mpi``.
"""

from __future__ import annotations

import os
from typing import ClassVar

from typing_extensions import override

from xtrain.core.environment import ClusterEnvironment
from xtrain.strategies.environments._common import check_layout, env_int, port_from

__all__ = ["HorovodEnvironment"]


class HorovodEnvironment(ClusterEnvironment):
    """Ranks from ``HOROVOD_RANK``, ``HOROVOD_SIZE``, ``HOROVOD_LOCAL_RANK``/``_SIZE`` and ``HOROVOD_CROSS_RANK``/``_SIZE``.

    Detected before SLURM and MPI (``horovodrun`` inside a SLURM allocation still started the processes itself).
    A ``torch.distributed`` rendezvous, for strategies other than Horovod run under ``horovodrun``, uses
    ``MASTER_ADDR``/``MASTER_PORT`` when set, else Horovod's rendezvous host and a port every rank derives alike
    from it.
    """

    name: ClassVar[str] = "horovod"
    detect_priority: ClassVar[int | None] = 35

    @classmethod
    @override
    def detect(cls) -> bool:
        return "HOROVOD_RANK" in os.environ and "HOROVOD_SIZE" in os.environ

    @property
    @override
    def creates_processes_externally(self) -> bool:
        return True

    @property
    @override
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR") or os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR") or "127.0.0.1"

    @property
    @override
    def main_port(self) -> int:
        if "MASTER_PORT" in os.environ:
            return int(os.environ["MASTER_PORT"])
        rendezvous = os.environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT", "0")
        return port_from(f"horovod-{self.main_address}:{rendezvous}")

    @override
    def world_size(self) -> int:
        return env_int("HOROVOD_SIZE")

    @override
    def global_rank(self) -> int:
        return env_int("HOROVOD_RANK")

    @override
    def local_rank(self) -> int:
        return env_int("HOROVOD_LOCAL_RANK", default=0)

    @override
    def node_rank(self) -> int:
        return env_int("HOROVOD_CROSS_RANK", default=0)

    @override
    def processes_per_node(self) -> int | None:
        return env_int("HOROVOD_LOCAL_SIZE", default=self.world_size())

    @override
    def validate_settings(self, *, num_devices: int, num_nodes: int) -> None:
        per_node = self.processes_per_node()
        assert per_node is not None
        nodes = env_int("HOROVOD_CROSS_SIZE", default=max(self.world_size() // max(per_node, 1), 1))
        check_layout(who="horovodrun", per_node=per_node, nodes=nodes, num_devices=num_devices, num_nodes=num_nodes,
                     per_node_flag="-np", nodes_flag="-H host count")
