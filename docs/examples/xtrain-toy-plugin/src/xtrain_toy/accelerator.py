"""The toy accelerator: the CPU, declared as a device of its own kind."""

from __future__ import annotations

from typing import ClassVar

import torch
from typing_extensions import override

from xtrain.core import Accelerator


class ToyAccelerator(Accelerator):
    """A toy device backed by the CPU: two "devices", bf16 unsupported, gloo collectives."""

    name: ClassVar[str] = "toy"
    device_type: ClassVar[str] = "cpu"
    dist_backend: ClassVar[str | None] = "gloo"
    autocast_device_type: ClassVar[str] = "cpu"
    supported_precisions: ClassVar[frozenset[str] | None] = frozenset({"32-true", "64-true"})
    auto_priority: ClassVar[int] = -10  # never chosen by accelerator="auto" over a real device
    default_strategy: ClassVar[str] = "toy_single"
    setup_calls: ClassVar[list[str]] = []

    @classmethod
    @override
    def is_available(cls) -> bool:
        return True

    @classmethod
    @override
    def device_count(cls) -> int:
        return 2

    @classmethod
    @override
    def auto_device_count(cls) -> int:
        return 1

    @override
    def get_device(self, index: int) -> torch.device:
        return torch.device("cpu")

    @override
    def setup_device(self, device: torch.device) -> None:
        ToyAccelerator.setup_calls.append(str(device))

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        return {"toy_memory_used_mb": 0.0, "toy_memory_free_mb": 1024.0}
