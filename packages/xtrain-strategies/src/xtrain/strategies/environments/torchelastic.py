"""Processes started by ``torchrun`` (torch.distributed.elastic)."""

from __future__ import annotations

import os
from typing import ClassVar

from typing_extensions import override

from xtrain.core.environment import ClusterEnvironment
from xtrain.strategies.environments._common import check_layout, env_int

__all__ = ["TorchElasticEnvironment"]


class TorchElasticEnvironment(ClusterEnvironment):
    """Ranks from torchrun's ``RANK``, ``LOCAL_RANK``, ``GROUP_RANK``, ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``.

    Detected first of all (torchrun inside a SLURM job is still torchrun). The rendezvous store is torchrun's own
    agent store, which the process group joins through ``MASTER_ADDR``/``MASTER_PORT``.
    """

    name: ClassVar[str] = "torchelastic"
    detect_priority: ClassVar[int | None] = 40

    @classmethod
    @override
    def detect(cls) -> bool:
        return "TORCHELASTIC_RUN_ID" in os.environ and "RANK" in os.environ

    @property
    @override
    def creates_processes_externally(self) -> bool:
        return True

    @property
    @override
    def main_address(self) -> str:
        return os.environ["MASTER_ADDR"]

    @property
    @override
    def main_port(self) -> int:
        return env_int("MASTER_PORT")

    @override
    def world_size(self) -> int:
        return env_int("WORLD_SIZE")

    @override
    def global_rank(self) -> int:
        return env_int("RANK")

    @override
    def local_rank(self) -> int:
        return env_int("LOCAL_RANK")

    @override
    def node_rank(self) -> int:
        return env_int("GROUP_RANK", "NODE_RANK", default=0)

    @override
    def processes_per_node(self) -> int | None:
        return env_int("LOCAL_WORLD_SIZE", default=0) or None

    @override
    def validate_settings(self, *, num_devices: int, num_nodes: int) -> None:
        per_node = env_int("LOCAL_WORLD_SIZE", default=num_devices)
        world = self.world_size()
        check_layout(who="torchrun", per_node=per_node, nodes=max(world // max(per_node, 1), 1),
                     num_devices=num_devices, num_nodes=num_nodes, per_node_flag="--nproc-per-node",
                     nodes_flag="--nnodes")
