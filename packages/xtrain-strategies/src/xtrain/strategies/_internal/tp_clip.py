"""Gradient clipping by norm for parameters spread over several device meshes (tensor parallelism + FSDP).

``torch.nn.utils.clip_grad_norm_`` stacks the per-parameter norms into one tensor, which DTensor refuses when they
live on different meshes: tensor-parallel parameters are on the whole (replicate, shard, tensor) mesh, the rest on the
data-parallel sub-mesh. Here the norm is taken per mesh, each made a plain tensor, and the parts combined.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

__all__ = ["clip_grad_norm_across_meshes"]


def _mesh_of(tensor: torch.Tensor) -> object:
    """The DTensor's mesh, or ``None`` for a plain tensor: the key gradients are grouped by."""
    from torch.distributed.tensor import DTensor

    return tensor.device_mesh if isinstance(tensor, DTensor) else None


def clip_grad_norm_across_meshes(parameters: Iterable[torch.Tensor], max_norm: float, *, norm_type: float = 2.0,
                                 device: torch.device | None = None) -> torch.Tensor:
    """Clip the gradients of ``parameters`` to a total ``norm_type``-norm of ``max_norm``; returns the total norm.

    The same total norm, and the same clipped gradients, as ``clip_grad_norm_`` on the unsharded model: each mesh's
    norm is reduced over that mesh (``full_tensor()``), then the parts are combined (the p-norm of the parts; their
    maximum for ``inf``). Every rank calls this with its parameters in the same order (the meshes' collectives are
    entered in order of first appearance).

    Args:
        parameters: Parameters whose ``.grad`` to clip (those without one are skipped).
        max_norm: The largest total norm the gradients keep.
        norm_type: The p of the p-norm (``inf`` for the largest absolute value).
        device: Where the returned norm lives (default: the first gradient's device).
    """
    from torch.distributed.tensor import DTensor

    params = [p for p in parameters if p.grad is not None]
    groups: list[tuple[object, list[torch.Tensor]]] = []
    for p in params:
        mesh = _mesh_of(p.grad)  # type: ignore[arg-type]
        for key, members in groups:
            if key is mesh or (key is not None and mesh is not None and key == mesh):
                members.append(p)
                break
        else:
            groups.append((mesh, [p]))
    if not groups:
        return torch.tensor(0.0, device=device)
    device = device or params[0].grad.device  # type: ignore[union-attr]
    parts = []
    for _, members in groups:
        norm = torch.nn.utils.get_total_norm([p.grad for p in members], norm_type)  # type: ignore[misc]
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        parts.append(norm.to(device=device, dtype=torch.float32))
    stacked = torch.stack(parts)
    total = stacked.max() if math.isinf(norm_type) else torch.linalg.vector_norm(stacked, norm_type)
    # Per mesh again: a foreach op over DTensors of different meshes fails like the stack does. The coefficient stays
    # a one-element tensor (DTensor takes it as a replicated scalar): no device-to-host sync.
    for _, members in groups:
        torch.nn.utils.clip_grads_with_norm_(members, max_norm, total)
    return total
