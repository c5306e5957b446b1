"""The Acme cluster: its job scheduler starts every process and describes it in ``ACME_*`` variables.

``ACME_RANK``, ``ACME_LOCAL_RANK``, ``ACME_NODE_RANK``, ``ACME_WORLD_SIZE`` and ``ACME_COORDINATOR``
(``host:port`` of the rank-0 rendezvous) are set in every process of a job.
"""

from __future__ import annotations

import os
from typing import ClassVar

from typing_extensions import override

from xtrain.core.environment import ClusterEnvironment
from xtrain.core.errors import ConfigError


class AcmeEnvironment(ClusterEnvironment):
    """Processes started by the Acme scheduler (detected by ``ACME_RANK``)."""

    name: ClassVar[str] = "acme"
    detect_priority: ClassVar[int | None] = 10  # above "local" (0): inside an Acme job, this is the environment

    @classmethod
    @override
    def detect(cls) -> bool:
        return "ACME_RANK" in os.environ

    @property
    @override
    def creates_processes_externally(self) -> bool:
        return True  # the scheduler started every rank: no launcher may start more

    @property
    @override
    def main_address(self) -> str:
        return os.environ["ACME_COORDINATOR"].rsplit(":", 1)[0]

    @property
    @override
    def main_port(self) -> int:
        return int(os.environ["ACME_COORDINATOR"].rsplit(":", 1)[1])

    @override
    def world_size(self) -> int:
        return int(os.environ["ACME_WORLD_SIZE"])

    @override
    def global_rank(self) -> int:
        return int(os.environ["ACME_RANK"])

    @override
    def local_rank(self) -> int:
        return int(os.environ["ACME_LOCAL_RANK"])

    @override
    def node_rank(self) -> int:
        return int(os.environ["ACME_NODE_RANK"])

    @override
    def validate_settings(self, *, num_devices: int, num_nodes: int) -> None:
        if num_devices * num_nodes != self.world_size():
            raise ConfigError("devices", num_devices, f"with num_nodes={num_nodes} makes "
                              f"{num_devices * num_nodes} processes, but the Acme job has {self.world_size()}.",
                              fix="set devices= to the processes per node and num_nodes= to the job's nodes.")
