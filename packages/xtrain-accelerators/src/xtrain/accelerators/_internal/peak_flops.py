"""Published dense peak FLOP/s of common data-centre GPUs, for the MFU that ``ThroughputMonitor`` reports.

Figures are the vendors' dense (no structured sparsity) tensor-core numbers per GPU. ``float32`` counts as TF32 when
torch lets matmuls use it (``torch.set_float32_matmul_precision("high")``), as the full-precision rate otherwise.
"""

from __future__ import annotations

import torch

__all__ = ["peak_flops_for"]

T = 1e12
# (name fragment, also required fragment or "", {kind: FLOP/s}); the first match wins, so specific names go first.
_TABLE: list[tuple[str, str, dict[str, float]]] = [
    ("H200", "", {"half": 989.4 * T, "tf32": 494.7 * T, "fp32": 66.9 * T, "fp8": 1978.9 * T}),
    ("H100", "PCIe", {"half": 756.5 * T, "tf32": 378.0 * T, "fp32": 51.2 * T, "fp8": 1513.0 * T}),
    ("H100", "", {"half": 989.4 * T, "tf32": 494.7 * T, "fp32": 66.9 * T, "fp8": 1978.9 * T}),
    ("A100", "", {"half": 312.0 * T, "tf32": 156.0 * T, "fp32": 19.5 * T}),
    ("L4", "", {"half": 121.0 * T, "tf32": 60.0 * T, "fp32": 30.3 * T, "fp8": 242.5 * T}),
    ("V100", "", {"fp16": 125.0 * T, "fp32": 15.7 * T}),
]


def _kind(dtype: torch.dtype) -> str | None:
    if dtype in (torch.bfloat16, torch.float16):
        return "half"
    if dtype == torch.float32:
        return "fp32" if torch.get_float32_matmul_precision() == "highest" else "tf32"
    if "float8" in str(dtype):
        return "fp8"
    return None


def peak_flops_for(device_name: str, dtype: torch.dtype) -> float | None:
    """The peak FLOP/s of the GPU called ``device_name`` in ``dtype``, or ``None`` when it is not in the table."""
    kind = _kind(dtype)
    if kind is None:
        return None
    for fragment, also, figures in _TABLE:
        if fragment in device_name and also in device_name:
            if kind == "half" and "half" not in figures:
                return figures.get("fp16") if dtype == torch.float16 else None
            return figures.get(kind, figures.get("fp32") if kind == "tf32" else None)
    return None
