"""The Acme NPU: a device library's view of its chips, declared to xtrain as data.

The "NPU" is simulated: its devices are the CPU, and ``ACME_NPU_COUNT`` plays the driver telling how many chips
the machine has. Replace the three marked lines with calls into your device library.
"""

from __future__ import annotations

import os
from typing import ClassVar

import torch
from typing_extensions import override

from xtrain.core.accelerator import Accelerator


class AcmeNPUAccelerator(Accelerator):
    """Acme NPUs (simulated on the CPU): ``ACME_NPU_COUNT`` chips, gloo collectives, no half precision."""

    name: ClassVar[str] = "acme_npu"
    device_type: ClassVar[str] = "cpu"  # a real NPU: its torch device type, e.g. "npu"
    dist_backend: ClassVar[str | None] = "gloo"  # a real NPU: its collective library's backend, e.g. "hccl"
    autocast_device_type: ClassVar[str] = "cpu"
    supported_precisions: ClassVar[frozenset[str] | None] = frozenset({"32-true", "64-true"})
    auto_priority: ClassVar[int] = 10  # above the CPU (0), below the GPUs (20-40)

    @classmethod
    @override
    def is_available(cls) -> bool:
        return cls.device_count() > 0

    @classmethod
    @override
    def device_count(cls) -> int:
        value = os.environ.get("ACME_NPU_COUNT", "")  # a real NPU: acme.device_count()
        return int(value) if value.isdigit() else 0

    @classmethod
    @override
    def unavailable_reason(cls) -> str | None:
        if cls.is_available():
            return None
        return "ACME_NPU_COUNT is not set (the Acme driver is not loaded); export ACME_NPU_COUNT=<number of NPUs>"

    @override
    def get_device(self, index: int) -> torch.device:
        return torch.device("cpu")  # a real NPU: torch.device(self.device_type, index)

    @override
    def setup_device(self, device: torch.device) -> None:
        os.environ["ACME_NPU_CURRENT"] = str(device)  # a real NPU: acme.set_device(device.index)

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        return {"memory_used_mb": 0.0, "memory_free_mb": 16384.0}  # a real NPU: acme.memory_info(...)
