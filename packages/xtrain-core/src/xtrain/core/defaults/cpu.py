"""The CPU accelerator."""

from __future__ import annotations

import os
from typing import ClassVar

import torch
from typing_extensions import override

from xtrain.core.accelerator import Accelerator

__all__ = ["CPUAccelerator"]


class CPUAccelerator(Accelerator):
    """The CPU: always available; ``devices=N`` starts N processes, however many cores there are."""

    name: ClassVar[str] = "cpu"
    device_type: ClassVar[str] = "cpu"
    dist_backend: ClassVar[str | None] = "gloo"
    autocast_device_type: ClassVar[str] = "cpu"
    auto_priority: ClassVar[int] = 0
    device_index_limit: ClassVar[bool] = False

    @classmethod
    @override
    def is_available(cls) -> bool:
        return True

    @classmethod
    @override
    def device_count(cls) -> int:
        return os.cpu_count() or 1

    @classmethod
    @override
    def auto_device_count(cls) -> int:
        return 1

    @override
    def get_device(self, index: int) -> torch.device:
        return torch.device("cpu")

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        try:
            import resource
        except ImportError:  # pragma: no cover - not on Windows
            return {}
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {"cpu_max_rss_mb": usage.ru_maxrss / 1024.0, "cpu_user_time_s": usage.ru_utime}
