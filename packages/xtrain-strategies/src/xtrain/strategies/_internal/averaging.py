"""Averaging model weights across ranks: with everyone (all-reduce) or with one peer (gossip).

Used by the model-averaging strategies (``local_sgd``, ``decentralized``, ``async_model_averaging``). The state
averaged is every parameter plus the floating-point buffers (BatchNorm statistics), flattened per dtype so each
exchange is one collective per dtype.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from xtrain.strategies._internal.comm_hooks import CommStats

__all__ = ["average_gradients", "average_with_all", "average_with_peer", "broadcast_from_zero", "model_tensors",
           "shift_peers"]


def model_tensors(module: nn.Module) -> list[torch.Tensor]:
    """The tensors that define the model: parameters and floating-point buffers, in a fixed order."""
    return [p.data for p in module.parameters()] + [b for b in module.buffers() if b.is_floating_point()]


def _by_dtype(tensors: Iterable[torch.Tensor]) -> list[list[torch.Tensor]]:
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = defaultdict(list)
    for t in tensors:
        groups[(t.device, t.dtype)].append(t)
    return list(groups.values())


@torch.no_grad()
def average_with_all(tensors: list[torch.Tensor], *, stats: CommStats, group: object = None) -> None:
    """Replace every tensor by its mean over all ranks of ``group``."""
    world = dist.get_world_size(group)  # type: ignore[arg-type]
    for same in _by_dtype(tensors):
        flat = _flatten_dense_tensors(same)
        stats.add(flat)
        dist.all_reduce(flat, group=group)  # type: ignore[arg-type]
        flat /= world
        for t, avg in zip(same, _unflatten_dense_tensors(flat, same), strict=True):
            t.copy_(avg)


@torch.no_grad()
def broadcast_from_zero(tensors: list[torch.Tensor]) -> None:
    """Overwrite ``tensors`` with rank 0's (one broadcast per dtype), so every replica starts alike."""
    for same in _by_dtype(tensors):
        flat = _flatten_dense_tensors(same)
        dist.broadcast(flat, 0)
        for t, value in zip(same, _unflatten_dense_tensors(flat, same), strict=True):
            t.copy_(value)


def shift_peers(rank: int, world: int, round_index: int) -> tuple[int, int]:
    """``(send_to, receive_from)`` of a gossip round: a ring whose shift changes every round (Bagua's
    ``shift_one``), so over ``world - 1`` rounds every rank hears from every other."""
    shift = 1 + round_index % max(world - 1, 1)
    return (rank + shift) % world, (rank - shift) % world


@torch.no_grad()
def average_with_peer(tensors: list[torch.Tensor], *, round_index: int, stats: CommStats) -> None:
    """Average with one peer: send this rank's tensors to ``rank + shift``, average with those of ``rank - shift``.

    The mixing matrix ``(I + P) / 2`` (``P`` a permutation) is doubly stochastic, so repeated rounds drive every rank
    to the global average while each round sends one model's worth of bytes per rank and waits for no one else.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    send_to, receive_from = shift_peers(rank, world, round_index)
    for same in _by_dtype(tensors):
        flat = _flatten_dense_tensors(same)
        received = torch.empty_like(flat)
        stats.add(flat)
        ops = [dist.P2POp(dist.isend, flat, send_to), dist.P2POp(dist.irecv, received, receive_from)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        flat.add_(received).mul_(0.5)
        for t, avg in zip(same, _unflatten_dense_tensors(flat, same), strict=True):
            t.copy_(avg)


@torch.no_grad()
def average_gradients(parameters: Iterable[nn.Parameter], *, stats: CommStats) -> None:
    """Average the gradients over all ranks (warm-up steps of the averaging strategies run as plain data parallel)."""
    grads = []
    for p in parameters:
        if p.requires_grad:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
    average_with_all(grads, stats=stats)
