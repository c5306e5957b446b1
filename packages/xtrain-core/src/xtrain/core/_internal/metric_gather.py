"""Accelerate's ``gather_for_metrics`` and ``pad_across_processes`` for the Engine.

An evaluation over a dataset that does not divide by the world size counts some samples twice: the distributed
sampler repeats up to ``world_size - 1`` of them so that every rank runs as many batches. Accelerate users gather
their predictions with ``gather_for_metrics``, which drops those repeats; porting to the Engine silently changed
their metrics. The sampler knows which of a rank's rows repeat (:meth:`EngineLoader.share`), so the gather drops
exactly those and puts the rows in the order the sampler drew them: for an unshuffled loader, the dataset's.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from xtrain.core._internal.apply import apply_to_tensors
from xtrain.core._internal.shard_padding import Layout
from xtrain.core.strategy import Strategy

__all__ = ["gather_objects", "gather_rows", "pad_to_largest"]


def _kept(rows: int, layout: Layout | None, repeats: bool) -> int:
    """How many of this rank's leading rows are not repeats of another rank's samples."""
    if not repeats:
        return rows
    return max(rows - 1, 0) if layout == "samples" else 0


def _ordered(parts: list[Any], kept: list[int], interleave: bool) -> list[Any]:
    """Each rank's kept rows, rank after rank, or row position after row position (``interleave``: rank ``r``'s row
    ``j`` is sample ``j * world_size + r`` of the batch's draw, so this is the sampler's order)."""
    if not interleave:
        return [part[:k] for part, k in zip(parts, kept, strict=True)]
    width = max(kept, default=0)
    return [parts[r][j:j + 1] for j in range(width) for r in range(len(parts)) if j < kept[r]]


def gather_rows(strategy: Strategy, data: Any, *, layout: Layout | None, repeats: bool) -> Any:
    """Every rank's tensors of ``data`` concatenated along their first dimension, repeated samples dropped.

    A 0-dim tensor counts as one row. Tensors may differ in their first dimension between ranks (they are padded
    for the collective and cut back). Rows are interleaved only when every rank has as many of them and the ranks
    take every ``world_size``-th sample, i.e. when they are a batch's per-sample outputs.
    """

    def gather(tensor: torch.Tensor) -> torch.Tensor:
        t = tensor.reshape(1) if tensor.ndim == 0 else tensor
        rows = t.shape[0]
        counts = strategy.all_gather(torch.tensor([rows, _kept(rows, layout, repeats)], device=t.device))
        sizes, kept = counts[:, 0].tolist(), counts[:, 1].tolist()
        largest = max(sizes)
        if rows < largest:
            t = torch.cat([t, t.new_zeros((largest - rows, *t.shape[1:]))])
        stacked = strategy.all_gather(t.contiguous())
        if layout == "samples" and tensor.ndim > 0 and len(set(sizes)) == 1:
            wanted = torch.arange(largest).unsqueeze(1) < torch.tensor(kept).unsqueeze(0)  # (row, rank)
            return stacked.transpose(0, 1).flatten(0, 1)[wanted.flatten().to(stacked.device)]
        return torch.cat(_ordered(list(stacked), kept, interleave=False))

    return apply_to_tensors(data, gather)


def gather_objects(strategy: Strategy, data: Any, *, layout: Layout | None, repeats: bool) -> list[Any]:
    """Every rank's picklable ``data``: lists and tuples are joined (repeated samples dropped, rows interleaved as
    in :func:`gather_rows`); anything else comes back as one entry per rank."""
    parts = strategy.all_gather_object(data)
    if not all(isinstance(p, (list, tuple)) for p in parts):
        return parts
    sizes = [len(p) for p in parts]
    kept = strategy.all_gather_object(_kept(len(data), layout, repeats))
    interleave = layout == "samples" and len(set(sizes)) == 1
    return [item for part in _ordered([list(p) for p in parts], kept, interleave) for item in part]


def pad_to_largest(strategy: Strategy, data: Any, *, dim: int, pad_index: int | float, pad_first: bool) -> Any:
    """Pad each tensor of ``data`` along ``dim`` to the largest size any rank has there, so they can be gathered."""

    def pad(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.ndim == 0 or not -tensor.ndim <= dim < tensor.ndim:
            return tensor
        axis = dim % tensor.ndim
        size = tensor.shape[axis]
        largest = int(strategy.all_gather(torch.tensor(size, device=tensor.device)).max().item())
        if size == largest:
            return tensor
        widths = [0, 0] * (tensor.ndim - axis)
        widths[-2 if pad_first else -1] = largest - size
        return F.pad(tensor, widths, value=pad_index)

    return apply_to_tensors(data, pad)
