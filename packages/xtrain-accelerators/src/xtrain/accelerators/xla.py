"""The XLA accelerator (alias ``tpu``): TPUs, and XLA's CPU and GPU clients, through torch_xla's PJRT runtime.

Importing this module does not import torch_xla. Availability and the device count are read from the environment
(``PJRT_DEVICE``, ``CPU_NUM_DEVICES``, ``GPU_NUM_DEVICES``) and ``importlib.util.find_spec``; only a TPU host's count
asks torch_xla (which reads the PCI bus, without starting the runtime). torch_xla itself is imported when a device is
set up.
"""

from __future__ import annotations

import warnings
from typing import ClassVar

import torch
from typing_extensions import override

from xtrain.accelerators._internal.stats import MB, collect, has_module
from xtrain.accelerators._internal.xla_runtime import (
    FAITHFUL_ROUNDING,
    import_xla,
    local_device_count,
    pjrt_device,
    request_faithful_rounding,
)
from xtrain.core.accelerator import Accelerator

__all__ = ["XLAAccelerator"]


class XLAAccelerator(Accelerator):
    """XLA devices through torch_xla (``pip install 'xtrain-accelerators[xla]'``).

    XLA is available when torch_xla is installed and a PJRT device is known: ``PJRT_DEVICE`` is set (``TPU``,
    ``CPU``, ``CUDA``) or libtpu is installed. A machine that merely has torch_xla installed does not count, so
    ``accelerator="auto"`` never moves a CPU user onto XLA's CPU client by accident.

    It runs under three strategies of this package: ``single_xla`` (one device), ``xla`` (one process per device,
    collectives over XLA; TPUs) and ``xla_spmd`` (one process, the batch sharded over all devices). DDP and other
    process-group strategies do not know XLA's lazy tensors, so ``supported_strategies`` refuses them up front.
    TPUs compute in float32 and bfloat16, hence the supported precisions. Evaluation runs under ``torch.no_grad``:
    XLA tensors cannot be inference tensors.

    torch's autograd engine sets up its per-device queues at the first backward pass of a process, so a process that
    runs a backward pass on another device first (a CPU run, say) must start the XLA runtime before that
    (``torch_xla.device()``): otherwise backward on XLA fails with an internal assertion in ``engine.cpp``.
    Processes that only train on XLA are not affected.
    """

    name: ClassVar[str] = "xla"
    device_type: ClassVar[str] = "xla"
    dist_backend: ClassVar[str | None] = "xla"
    autocast_device_type: ClassVar[str] = "xla"
    supported_precisions: ClassVar[frozenset[str] | None] = frozenset({"32-true", "bf16-mixed", "bf16-true"})
    supported_strategies: ClassVar[frozenset[str] | None] = frozenset({"single_xla", "xla", "xla_spmd"})
    supports_inference_mode: ClassVar[bool] = False
    auto_priority: ClassVar[int] = 40
    default_strategy: ClassVar[str] = "single_xla"
    default_parallel_strategy: ClassVar[str] = "xla"
    interactive_parallel_strategy: ClassVar[str | None] = None
    device_index_limit: ClassVar[bool] = True

    @classmethod
    @override
    def is_available(cls) -> bool:
        return pjrt_device() is not None and cls.device_count() > 0

    @classmethod
    @override
    def device_count(cls) -> int:
        return local_device_count()

    @classmethod
    @override
    def unavailable_reason(cls) -> str | None:
        if not has_module("torch_xla"):
            return "torch_xla is not installed; pip install 'xtrain-accelerators[xla]'"
        if pjrt_device() is None:
            return ("torch_xla is installed but no PJRT device is chosen and libtpu is absent; set PJRT_DEVICE "
                    "(TPU, CUDA or CPU)")
        if cls.device_count() == 0:
            return f"PJRT_DEVICE={pjrt_device()} reports no devices"
        return None

    @override
    def setup_device(self, device: torch.device) -> None:
        """Import torch_xla (which registers the ``xla`` device with torch) before the first tensor moves there.

        Under ``deterministic=True`` XLA is also asked to round as written (``--xla_allow_excess_precision=false``):
        otherwise bfloat16 results depend on where graphs were cut, and a resumed run is not bitwise equal to an
        uninterrupted one.
        """
        if torch.are_deterministic_algorithms_enabled() and not request_faithful_rounding():
            warnings.warn(f"deterministic=True on XLA: the XLA runtime already started, so {FAITHFUL_ROUNDING} "
                          "cannot take effect and bfloat16 results may depend on graph boundaries; set "
                          f"XLA_FLAGS={FAITHFUL_ROUNDING} before the process starts.", stacklevel=2)
        import_xla()

    def local_device(self) -> torch.device:
        """The device torch_xla gave this process or thread (workers of the ``xla`` strategy each get their own)."""
        torch_xla = import_xla()
        return torch.device(torch_xla.device())

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        """Memory used, free and the peak (MB) where the PJRT client reports them (TPU, GPU; XLA's CPU client does not).

        PJRT reports no utilisation.
        """
        xm = import_xla("torch_xla.core.xla_model")
        try:
            info = dict(xm.get_memory_info(device))
        except RuntimeError:
            return {}
        stats = collect({
            "memory_used_mb": lambda: info["bytes_used"] / MB,
            "memory_total_mb": lambda: info["bytes_limit"] / MB,
            "memory_peak_used_mb": lambda: info["peak_bytes_used"] / MB,
        })
        if "memory_used_mb" in stats and "memory_total_mb" in stats:
            stats["memory_free_mb"] = stats["memory_total_mb"] - stats["memory_used_mb"]
        return stats
