"""Moving tensors of dtypes Horovod's torch operations lack.

Horovod 0.28's torch extension has no bfloat16 or bool operations, on CPU or CUDA. Where no arithmetic runs
(broadcast, gather) a tensor travels as its bits, through a view of the same size (exact, no copy). Where Horovod
sums (gradient all-reduce), bfloat16 is sent as float32 and cast back: the same rounding as a bfloat16 sum would
give at best, at twice the bytes of bfloat16 on the wire.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["SUM_DTYPE", "BFloat16AsFloat32", "bitwise", "broadcast_tensors"]

# Horovod's CPU and CUDA operations have no bfloat16: sum and average it in float32, bool as uint8.
SUM_DTYPE = {torch.bfloat16: torch.float32, torch.bool: torch.uint8}
_BITS = {torch.bfloat16: torch.int16, torch.bool: torch.uint8}


def bitwise(tensor: torch.Tensor) -> torch.Tensor:
    """A view Horovod can move: ``tensor`` itself, or its bits as a same-sized integer dtype."""
    bits = _BITS.get(tensor.dtype)
    return tensor if bits is None else tensor.view(bits)


def broadcast_tensors(hvd: Any, tensors: Iterable[tuple[str, torch.Tensor]], *, root_rank: int) -> None:
    """``hvd.broadcast_parameters`` for any dtype: each tensor is overwritten in place with ``root_rank``'s."""
    hvd.broadcast_parameters([(name, bitwise(t)) for name, t in tensors], root_rank=root_rank)


class BFloat16AsFloat32:
    """A Horovod gradient compressor: bfloat16 gradients are all-reduced in float32, others as they are."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.dtype | None]:
        if tensor.dtype == torch.bfloat16:
            return tensor.float(), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: torch.dtype | None) -> torch.Tensor:
        return tensor if ctx is None else tensor.to(ctx)
