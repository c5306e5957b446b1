"""Peak FLOP/s for MFU: the table of known GPUs, and (on a GPU machine) ThroughputMonitor's MFU on a real device."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from xtrain.accelerators._internal.peak_flops import peak_flops_for
from xtrain.accelerators.cuda import CUDAAccelerator


@pytest.mark.parametrize(("name", "dtype", "expected"), [
    ("NVIDIA H200", torch.bfloat16, 989.4e12),
    ("NVIDIA H100 80GB HBM3", torch.float16, 989.4e12),
    ("NVIDIA H100 PCIe", torch.bfloat16, 756.5e12),
    ("NVIDIA A100-SXM4-80GB", torch.bfloat16, 312e12),
    ("Tesla V100-SXM2-16GB", torch.float16, 125e12),
    ("Tesla V100-SXM2-16GB", torch.bfloat16, None),
    ("NVIDIA GeForce GTX 1080", torch.bfloat16, None),
    ("NVIDIA A100-SXM4-80GB", torch.float64, None),
])
def test_known_gpus_have_their_published_peak(name: str, dtype: torch.dtype, expected: float | None) -> None:
    assert peak_flops_for(name, dtype) == (pytest.approx(expected) if expected else None)


def test_float32_counts_as_tf32_only_when_torch_allows_it() -> None:
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert peak_flops_for("NVIDIA A100-SXM4-40GB", torch.float32) == pytest.approx(19.5e12)
        torch.set_float32_matmul_precision("high")
        assert peak_flops_for("NVIDIA A100-SXM4-40GB", torch.float32) == pytest.approx(156e12)
    finally:
        torch.set_float32_matmul_precision(before)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDAAccelerator.is_available(), reason="needs a CUDA GPU")
def test_throughput_monitor_reports_mfu_and_device_stats_on_cuda(tmp_path: Path) -> None:
    from xtrain.core import CSVLogger, Trainer
    from xtrain.core.callbacks import DeviceStatsMonitor, ThroughputMonitor
    from xtrain.core.testing import TinyClassifier, tiny_dataset

    name = torch.cuda.get_device_name(0)
    monitor, stats = ThroughputMonitor(), DeviceStatsMonitor()
    trainer = Trainer(accelerator="cuda", devices=1, precision="bf16-mixed", max_steps=4, log_every_n_steps=2,
                      callbacks=[monitor, stats], logger=CSVLogger(tmp_path), enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(TinyClassifier(), DataLoader(tiny_dataset(64), batch_size=16))
    print(name, monitor.last, stats.last)
    assert monitor.flops_per_batch and monitor.flops_per_batch > 0
    assert any("memory" in key or "allocated" in key for key in stats.last), stats.last
    if peak_flops_for(name, torch.bfloat16) is not None:
        assert 0 < monitor.last["throughput/mfu"] < 1
