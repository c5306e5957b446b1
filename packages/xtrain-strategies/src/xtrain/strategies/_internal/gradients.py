"""Averaging gradients across ranks outside DDP's hooks (DDP2, and DDP under manual optimization)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

__all__ = ["all_reduce_gradients"]


def all_reduce_gradients(parameters: Iterable[torch.nn.Parameter], world_size: int) -> None:
    """Average the gradients of ``parameters`` over all ranks: one flattened all-reduce per (device, dtype).

    A parameter without a gradient gets zeros first, so every rank sends the same layout.
    """
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = defaultdict(list)
    for param in parameters:
        if param.requires_grad:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            groups[(param.grad.device, param.grad.dtype)].append(param.grad)
    for grads in groups.values():
        flat = _flatten_dense_tensors(grads)
        dist.all_reduce(flat)
        flat /= world_size
        for grad, synced in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
            grad.copy_(synced)
