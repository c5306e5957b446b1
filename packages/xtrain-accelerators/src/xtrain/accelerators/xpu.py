"""The XPU accelerator: Intel GPUs (Data Center GPU Max, Arc) through ``torch.xpu``."""

from __future__ import annotations

from typing import ClassVar

import torch
from typing_extensions import override

from xtrain.accelerators._internal.stats import allocator_stats
from xtrain.core.accelerator import Accelerator

__all__ = ["XPUAccelerator"]


class XPUAccelerator(Accelerator):
    """Intel GPUs through ``torch.xpu`` (built into torch since 2.4); collectives through oneCCL (``xccl``).

    The device count comes from ``torch.xpu.device_count()``, which asks Level Zero Sysman first and so does not
    initialize the XPU runtime in the calling process. Precision support depends on the GPU model (Arc GPUs have no
    float64), which class data cannot know, so ``supported_precisions`` is ``None`` and torch reports a missing
    dtype when it is used.
    """

    name: ClassVar[str] = "xpu"
    device_type: ClassVar[str] = "xpu"
    dist_backend: ClassVar[str | None] = "xccl"
    autocast_device_type: ClassVar[str] = "xpu"
    supported_precisions: ClassVar[frozenset[str] | None] = None
    auto_priority: ClassVar[int] = 20
    device_index_limit: ClassVar[bool] = True

    @classmethod
    @override
    def is_available(cls) -> bool:
        return cls.device_count() > 0

    @classmethod
    @override
    def device_count(cls) -> int:
        xpu = getattr(torch, "xpu", None)
        if xpu is None or not hasattr(xpu, "device_count"):
            return 0
        return int(xpu.device_count())

    @classmethod
    @override
    def unavailable_reason(cls) -> str | None:
        xpu = getattr(torch, "xpu", None)
        if xpu is None or not hasattr(xpu, "device_count") or not getattr(xpu, "_is_compiled", lambda: True)():
            return (f"torch {torch.__version__} was built without XPU support; install an XPU build of torch "
                    f"(https://pytorch.org/get-started/locally/)")
        if cls.device_count() == 0:
            return "torch sees no Intel GPU: check the GPU driver and ZE_AFFINITY_MASK"
        return None

    @override
    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` current, so this rank's kernels and oneCCL run on the GPU it owns."""
        torch.xpu.set_device(device)

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        """Memory allocated, reserved, free and total (MB); torch.xpu reports no utilisation."""
        return allocator_stats(torch.xpu, device)

    @override
    def teardown(self) -> None:
        if self.is_available():
            torch.xpu.empty_cache()
