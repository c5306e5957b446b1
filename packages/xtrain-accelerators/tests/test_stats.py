"""Device statistics: what each accelerator reports, and that a statistic a library lacks is left out, not raised."""

from __future__ import annotations

import pytest
import torch

from xtrain.accelerators._internal.stats import collect, collect_pair, has_module
from xtrain.accelerators.cuda import CUDAAccelerator


def test_collect_keeps_the_numbers_the_library_gave() -> None:
    def missing() -> float:
        raise RuntimeError("not supported by this driver")

    def not_built() -> float:
        raise AttributeError("module 'torch.xpu' has no attribute 'mem_get_info'")

    stats = collect({"a": lambda: 3, "b": missing, "c": not_built, "d": lambda: 2.5})
    assert stats == {"a": 3.0, "d": 2.5}
    assert all(isinstance(v, float) for v in stats.values())
    assert collect_pair(lambda: (1, 2)) == (1.0, 2.0)
    assert collect_pair(lambda: torch.cuda.mem_get_info(torch.device("cuda", 99))) is None


def test_has_module_does_not_import() -> None:
    import sys

    assert has_module("json") and not has_module("surely_not_a_module_xtrain")
    assert has_module("torch_xla") == ("torch_xla" in sys.modules or has_module("torch_xla"))
    assert not has_module("")


def test_cuda_stats_without_a_gpu_leave_out_what_cannot_be_read() -> None:
    if CUDAAccelerator.is_available():
        pytest.skip("this machine has a GPU; tests/test_gpu.py checks the real numbers")
    stats = CUDAAccelerator().get_device_stats(torch.device("cuda", 0))
    assert not {"memory_free_mb", "memory_total_mb", "memory_used_mb", "utilization_percent"} & set(stats)
    assert all(v == 0.0 for v in stats.values()), stats
