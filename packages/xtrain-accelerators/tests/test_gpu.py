"""CUDA for real: training on the GPU under every installed single-device and parallel strategy and precision.

Every test here is marked ``gpu`` and skips without CUDA; ``tools/gpu_check.py run`` runs them (``pytest -m gpu``)
on a GPU machine. Precisions and multi-process strategies come from other packages: a cell whose package is not
installed skips, naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from xtrain.accelerators.cuda import CUDAAccelerator
from xtrain.core import Trainer, seed_everything
from xtrain.core.registry import PRECISIONS, STRATEGIES
from xtrain.core.testing import TinyClassifier, python_command, run_probe, run_processes, tiny_dataset

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not CUDAAccelerator.is_available(), reason="needs a CUDA GPU"),
]

PRECISION_CELLS = {
    "32-true": torch.float32, "64-true": torch.float64, "16-mixed": torch.float32, "bf16-mixed": torch.float32,
    "16-true": torch.float16, "bf16-true": torch.bfloat16,
}


def _needs(registry: Any, name: str, package: str) -> None:
    if name not in registry:
        pytest.skip(f"{name!r} is not installed here (pip install {package})")


@pytest.mark.parametrize("precision", list(PRECISION_CELLS))
def test_single_device_trains_on_cuda_in_every_precision(precision: str, tmp_path: Path) -> None:
    if precision != "32-true":
        _needs(PRECISIONS, precision, "xtrain-precision")
    seed_everything(0)
    module = TinyClassifier()
    trainer = Trainer(accelerator="cuda", strategy="single_device", devices=1, precision=precision, max_steps=16,
                      logger=False, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)
    trainer.fit(module, DataLoader(tiny_dataset(256), batch_size=16, shuffle=True))
    assert trainer.strategy.root_device == torch.device("cuda", 0)
    assert {p.device for p in module.parameters()} == {torch.device("cuda", 0)}
    assert module.param_dtypes == {PRECISION_CELLS[precision]}
    assert sum(module.losses[-4:]) < sum(module.losses[:4]), module.losses
    saved = torch.load(Path(trainer.checkpoint_callback.last_model_path), weights_only=True)  # type: ignore[union-attr]
    assert saved["xtrain"]["precision"] == precision


def test_gpu_alias_trains_on_cuda(tmp_path: Path) -> None:
    records = run_probe(tmp_path, {"accelerator": "gpu", "devices": 1})
    assert records[0]["device_type"] == "cuda" and records[0]["losses"][-1] < records[0]["losses"][0]


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn", "fsdp"])
def test_parallel_strategies_train_on_every_gpu(strategy: str, tmp_path: Path) -> None:
    _needs(STRATEGIES, strategy, "xtrain-strategies")
    devices = CUDAAccelerator.device_count()
    records = run_probe(tmp_path, {"accelerator": "cuda", "strategy": strategy, "devices": devices}, nprocs=devices,
                        timeout=180)
    assert [r["rank"] for r in records] == list(range(devices))
    for r in records:
        assert r["device_type"] == "cuda" and r["losses"][-1] < r["losses"][0]
        assert r["reduce_sum"] == devices * (devices + 1) / 2


def test_device_stats_report_memory_and_utilisation() -> None:
    acc = CUDAAccelerator()
    device = torch.device("cuda", 0)
    acc.setup_device(device)
    block = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device=device)
    stats = acc.get_device_stats(device)
    assert stats["memory_allocated_mb"] >= 64 and stats["memory_reserved_mb"] >= 64
    assert 0 < stats["memory_free_mb"] < stats["memory_total_mb"]
    assert stats["memory_used_mb"] == pytest.approx(stats["memory_total_mb"] - stats["memory_free_mb"])
    try:
        import pynvml  # noqa: F401
    except ImportError:
        assert "utilization_percent" not in stats
    else:
        assert 0 <= stats["utilization_percent"] <= 100
    del block


def test_availability_does_not_initialize_cuda(tmp_path: Path) -> None:
    """A fork-based launcher started after resolution needs a parent in which CUDA was never initialized."""
    code = ("import json, torch\nfrom xtrain.core._internal.resolve import resolve\n"
            "from xtrain.accelerators.cuda import CUDAAccelerator\n"
            "r = resolve(accelerator='cuda', devices=1).strategy\n"
            "print(json.dumps({'available': CUDAAccelerator.is_available(), 'count': CUDAAccelerator.device_count(),"
            " 'device': str(r.root_device), 'initialized': torch.cuda.is_initialized()}))\n")
    result = run_processes([python_command("-c", code)], timeout=120, cwd=tmp_path).check()
    report = json.loads(result.processes[0].stdout.strip().splitlines()[-1])
    assert report == {"available": True, "count": torch.cuda.device_count(), "device": "cuda:0",
                      "initialized": False}
