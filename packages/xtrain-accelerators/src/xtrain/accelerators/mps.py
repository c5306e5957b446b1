"""The MPS accelerator: the GPU of Apple silicon Macs through Metal Performance Shaders."""

from __future__ import annotations

from typing import ClassVar

import torch
from typing_extensions import override

from xtrain.accelerators._internal.stats import MB, collect
from xtrain.core.accelerator import Accelerator

__all__ = ["MPSAccelerator"]


class MPSAccelerator(Accelerator):
    """The one Apple GPU of a Mac, through ``torch.mps``.

    A Mac has one GPU, so several processes would only share it: ``dist_backend`` is ``None`` and the validator
    refuses multi-process strategies on MPS with a clear message before anything starts (as Lightning does, with an
    error of its own). MPS has no float64, so ``64-true`` is not among the supported precisions.
    """

    name: ClassVar[str] = "mps"
    device_type: ClassVar[str] = "mps"
    dist_backend: ClassVar[str | None] = None
    autocast_device_type: ClassVar[str] = "mps"
    supported_precisions: ClassVar[frozenset[str] | None] = frozenset(
        {"32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"})
    auto_priority: ClassVar[int] = 30
    device_index_limit: ClassVar[bool] = True

    @classmethod
    @override
    def is_available(cls) -> bool:
        return bool(torch.backends.mps.is_available())

    @classmethod
    @override
    def device_count(cls) -> int:
        return 1 if cls.is_available() else 0

    @classmethod
    @override
    def unavailable_reason(cls) -> str | None:
        if cls.is_available():
            return None
        if not torch.backends.mps.is_built():
            return f"torch {torch.__version__} was built without MPS; MPS needs a macOS build of torch on Apple silicon"
        return "torch was built with MPS, but this Mac has no MPS device or its macOS is older than 12.3"

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        """Memory allocated by tensors and by the Metal driver, and the memory left below the recommended maximum (MB).

        Metal reports no utilisation, so there is none here.
        """
        stats = collect({
            "memory_allocated_mb": lambda: torch.mps.current_allocated_memory() / MB,
            "memory_driver_allocated_mb": lambda: torch.mps.driver_allocated_memory() / MB,
            "memory_total_mb": lambda: torch.mps.recommended_max_memory() / MB,
        })
        if "memory_driver_allocated_mb" in stats and "memory_total_mb" in stats:
            stats["memory_used_mb"] = stats["memory_driver_allocated_mb"]
            stats["memory_free_mb"] = stats["memory_total_mb"] - stats["memory_driver_allocated_mb"]
        return stats

    @override
    def teardown(self) -> None:
        if self.is_available():
            torch.mps.empty_cache()
