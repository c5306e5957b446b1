"""The ClusterEnvironment contract: who the processes are and who started them.

An environment reads ranks, world size and the rendezvous address from wherever the cluster puts them (torchrun's
variables, SLURM's, MPI's). It says whether the processes already exist, so a strategy knows whether to launch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

__all__ = ["ClusterEnvironment"]


class ClusterEnvironment(ABC):
    """Base class of every cluster environment.

    Attributes:
        name: The registry name (``"local"``, ``"torchelastic"``, ``"slurm"``).
        detect_priority: Order of automatic detection, highest first; ``None`` means only selected explicitly.
    """

    name: ClassVar[str]
    detect_priority: ClassVar[int | None] = 0

    @classmethod
    @abstractmethod
    def detect(cls) -> bool:
        """Whether this process runs under this environment (read from environment variables; must be cheap)."""

    @property
    @abstractmethod
    def creates_processes_externally(self) -> bool:
        """True when something other than xtrain started every rank, so no launcher must run."""

    @property
    @abstractmethod
    def main_address(self) -> str:
        """Host of the rank-0 rendezvous."""

    @property
    @abstractmethod
    def main_port(self) -> int:
        """Port of the rank-0 rendezvous."""

    @abstractmethod
    def world_size(self) -> int:
        """Total number of processes."""

    @abstractmethod
    def global_rank(self) -> int:
        """This process's rank among all processes."""

    @abstractmethod
    def local_rank(self) -> int:
        """This process's rank on its node."""

    @abstractmethod
    def node_rank(self) -> int:
        """This node's rank."""

    def processes_per_node(self) -> int | None:
        """How many processes the cluster started on this node, when it started them (torchrun's
        ``--nproc-per-node``); ``None`` when it does not say. ``devices="auto"`` then takes this count, so
        ``torchrun --nproc-per-node=2 train.py`` needs no ``devices=2`` in the script."""
        return None

    def set_world_size(self, size: int) -> None:
        """Receive the world size computed by the strategy (used by environments that do not know it)."""

    def set_global_rank(self, rank: int) -> None:
        """Receive the global rank computed by the strategy."""

    def validate_settings(self, *, num_devices: int, num_nodes: int) -> None:
        """Raise :class:`~xtrain.core.errors.ConfigError` when ``devices``/``num_nodes`` disagree with the cluster.

        Args:
            num_devices: The processes the strategy runs per node (``Strategy.processes_per_node``: the ``devices=``
                count for one-process-per-device strategies such as DDP, 1 for DataParallel and DDP2).
            num_nodes: The Trainer's ``num_nodes``.
        """

    def teardown(self) -> None:
        """Clean up variables this environment set."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
