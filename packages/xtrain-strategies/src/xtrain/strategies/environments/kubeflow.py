"""Pods of a Kubeflow ``PyTorchJob``: one training process per pod."""

from __future__ import annotations

import os
from typing import ClassVar

from typing_extensions import override

from xtrain.core.environment import ClusterEnvironment
from xtrain.core.errors import ConfigError
from xtrain.strategies.environments._common import env_int

__all__ = ["KubeflowEnvironment"]


class KubeflowEnvironment(ClusterEnvironment):
    """Ranks from the PyTorchJob operator's ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``.

    Never detected automatically (those variables are also what many other tools set): pass
    ``plugins=["kubeflow"]``. Each pod is one process and one node. To run several processes per pod, run
    ``torchrun`` in the pod (``nprocPerNode``), which is detected as ``torchelastic``.
    """

    name: ClassVar[str] = "kubeflow"
    detect_priority: ClassVar[int | None] = None

    @classmethod
    @override
    def detect(cls) -> bool:
        return False

    @property
    @override
    def creates_processes_externally(self) -> bool:
        return True

    @property
    @override
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

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
        return 0

    @override
    def node_rank(self) -> int:
        return self.global_rank()

    @override
    def validate_settings(self, *, num_devices: int, num_nodes: int) -> None:
        if num_devices != 1:
            raise ConfigError("devices", num_devices, "Kubeflow's PyTorchJob runs one process per pod.",
                              fix="write devices=1, or run torchrun in each pod (nprocPerNode) and drop the "
                                  "kubeflow plugin: torchrun is detected by itself.")
        if num_nodes != self.world_size():
            raise ConfigError("num_nodes", num_nodes, f"does not match the PyTorchJob's {self.world_size()} pods "
                              f"(WORLD_SIZE).", fix=f"write num_nodes={self.world_size()}.")
