"""The CUDA accelerator: NVIDIA GPUs (and AMD GPUs through ROCm builds of torch, which present themselves as CUDA)."""

from __future__ import annotations

from typing import ClassVar

import torch
from typing_extensions import override

from xtrain.accelerators._internal.peak_flops import peak_flops_for
from xtrain.accelerators._internal.stats import allocator_stats, collect, has_module
from xtrain.core.accelerator import Accelerator

__all__ = ["CUDAAccelerator"]


class CUDAAccelerator(Accelerator):
    """NVIDIA GPUs through ``torch.cuda``; collectives through NCCL.

    Availability and the device count come from ``torch.cuda.device_count()``, which asks NVML first and so does not
    initialize CUDA in the calling process: a fork-based launcher started afterwards still works. (That is also why
    ``torch.cuda.is_available()``, which initializes the driver, is not used.)

    Every precision torch offers runs on CUDA (``supported_precisions`` is ``None``); a precision that needs a
    particular GPU generation checks that itself.
    """

    name: ClassVar[str] = "cuda"
    device_type: ClassVar[str] = "cuda"
    dist_backend: ClassVar[str | None] = "nccl"
    autocast_device_type: ClassVar[str] = "cuda"
    supported_precisions: ClassVar[frozenset[str] | None] = None
    auto_priority: ClassVar[int] = 30
    device_index_limit: ClassVar[bool] = True

    @classmethod
    @override
    def is_available(cls) -> bool:
        return cls.device_count() > 0

    @classmethod
    @override
    def device_count(cls) -> int:
        if not torch.backends.cuda.is_built():
            return 0
        return int(torch.cuda.device_count())

    @classmethod
    @override
    def unavailable_reason(cls) -> str | None:
        if not torch.backends.cuda.is_built():
            return (f"torch {torch.__version__} was built without CUDA; install a CUDA build of torch "
                    f"(https://pytorch.org/get-started/locally/)")
        if cls.device_count() == 0:
            return ("torch sees no CUDA GPU: no NVIDIA driver is loaded, or CUDA_VISIBLE_DEVICES hides every GPU "
                    "(check `nvidia-smi` and CUDA_VISIBLE_DEVICES)")
        return None

    @override
    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` current, so kernels and NCCL of this process run on the GPU its rank owns."""
        torch.cuda.set_device(device)

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        """Memory allocated, reserved, free and total (MB), and utilisation (%) when NVML's binding is installed.

        Utilisation comes from ``torch.cuda.utilization``, which needs ``pynvml`` (``pip install nvidia-ml-py`` or
        ``xtrain-accelerators[cuda]``); without it the key is absent rather than an error in the training loop.
        """
        stats = allocator_stats(torch.cuda, device)
        if has_module("pynvml"):
            stats.update(collect({"utilization_percent": lambda: torch.cuda.utilization(device)}))
        return stats

    @override
    def peak_flops(self, device: torch.device, dtype: torch.dtype) -> float | None:
        """The GPU's published dense peak for ``dtype`` (H200, H100, A100, L4, V100), ``None`` for others."""
        return peak_flops_for(torch.cuda.get_device_name(device), dtype)

    @override
    def teardown(self) -> None:
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
