"""fsdp on CUDA (nccl): skipped without GPUs; run by tools/gpu_check.py on a GPU machine."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fsdp_helpers import max_difference, train, weights

pytestmark = pytest.mark.gpu


def _gpus(count: int) -> None:
    if not torch.cuda.is_available() or torch.cuda.device_count() < count:
        pytest.skip(f"needs {count} CUDA GPU(s)")


def test_fsdp_on_one_gpu_trains_bf16_and_its_sharded_checkpoint_resumes_on_the_cpu(tmp_path: Path) -> None:
    _gpus(1)
    source = train(tmp_path / "gpu", accelerator="cuda", strategy="fsdp", devices=1, batch_size=16,
                   precision="bf16-mixed", options={"auto_wrap_policy": ["Linear"], "async_save": True},
                   checkpoint={"dirpath": str(tmp_path / "ck"), "every_n_epochs": 1, "save_top_k": -1})
    assert source[0]["param_types"] == ["DTensor"] and source[0]["losses"][-1] < source[0]["losses"][0]
    resumed = train(tmp_path / "cpu", devices=1, batch_size=16, precision="bf16-mixed",
                    ckpt_path=str(tmp_path / "ck" / "epoch=0-step=4.ckpt"))
    assert resumed[0]["global_step"] == 8 and len(resumed[0]["losses"]) == 4
    # bf16 on two devices: the same steps, rounded differently.
    assert max(abs(a - b) for a, b in zip(resumed[0]["losses"], source[0]["losses"][4:], strict=True)) < 5e-2


def test_fsdp_on_two_gpus_matches_ddp(tmp_path: Path) -> None:
    _gpus(2)
    fsdp = train(tmp_path / "fsdp", accelerator="cuda", strategy="fsdp", devices=2, clip=0.5,
                 options={"auto_wrap_policy": ["Linear"]})
    ddp = train(tmp_path / "ddp", accelerator="cuda", strategy="ddp", devices=2, clip=0.5)
    assert max_difference(weights(fsdp[0]), weights(ddp[0])) <= 1e-5
