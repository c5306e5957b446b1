"""Warnings for precisions the CPU runs emulated: correct results, but slower than ``32-true``.

Users pick ``16-mixed`` on a laptop expecting a speed-up and get a slow-down, because most CPUs have no native
float16 arithmetic and older ones no native bfloat16 either. Lightning silently turns ``16-mixed`` into
``bf16-mixed`` on CPU; xtrain runs what was asked and says once per process what it costs. Only the CPU is judged
here: torch reports its instruction sets, and other devices declare what they support through their accelerator's
``supported_precisions``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

__all__ = ["SlowPrecisionWarning", "cpu_has_native", "warn_if_slow"]

_warned: set[tuple[str, str]] = set()
_BF16_TWIN = {"16-mixed": "bf16-mixed", "16-true": "bf16-true"}


class SlowPrecisionWarning(UserWarning):
    """A precision runs emulated or slowly on this hardware: training is correct but may be slower than float32.

    Silence it with ``warnings.filterwarnings("ignore", category=SlowPrecisionWarning)``.
    """


def _probe(name: str) -> bool:
    check: Callable[[], bool] | None = getattr(torch.cpu, name, None)
    if check is None:
        return False
    try:
        return bool(check())
    except (RuntimeError, AttributeError):
        return False


def cpu_has_native(dtype: torch.dtype) -> bool:
    """Whether this CPU computes in ``dtype`` natively (AVX512/AMX instructions), as torch reports it."""
    if dtype == torch.float16:
        return _probe("_is_amx_fp16_supported") or _probe("_is_avx512_fp16_supported")
    if dtype == torch.bfloat16:
        return _probe("_is_avx512_bf16_supported") or _probe("_is_amx_tile_supported")
    return True


def warn_if_slow(name: str, device_type: str, dtype: torch.dtype) -> None:
    """Warn once per process and precision when ``device_type`` is the CPU and it lacks native ``dtype`` math."""
    if device_type != "cpu" or (name, device_type) in _warned or cpu_has_native(dtype):
        return
    _warned.add((name, device_type))
    alternative = "32-true"
    if dtype == torch.float16 and cpu_has_native(torch.bfloat16) and name in _BF16_TWIN:
        alternative = _BF16_TWIN[name]
    warnings.warn(f"precision={name!r} on the CPU: this CPU has no native {str(dtype).removeprefix('torch.')} "
                  f"arithmetic, so torch emulates it. Training is correct but may be slower than '32-true'; "
                  f"precision={alternative!r} is likely faster here.", SlowPrecisionWarning, stacklevel=2)
