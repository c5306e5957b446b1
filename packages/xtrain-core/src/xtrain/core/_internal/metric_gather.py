"""Accelerate's ``gather_for_metrics`` and ``pad_across_processes`` for the Engine.

An evaluation over a dataset that does not divide by the world size counts some samples twice: the distributed
sampler repeats up to ``world_size - 1`` of them so that every rank runs as many batches. Accelerate users gather
their predictions with ``gather_for_metrics``, which drops those repeats; porting to the Engine silently changed
their metrics. The sampler knows which of a rank's rows repeat (:meth:`EngineLoader.share`), so the gather drops
exactly those and puts the rows in the order the sampler drew them: for an unshuffled loader, the dataset's.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import torch
import torch.nn.functional as F

from xtrain.core._internal.apply import apply_to_tensors
from xtrain.core._internal.shard_padding import Layout, Repeat
from xtrain.core.errors import ConfigError
from xtrain.core.strategy import Strategy

__all__ = ["gather_objects", "gather_rows", "pad_to_largest", "signatures"]


_DIMS = 8  # dimensions compared one by one; beyond them the size of a row still differs when a dimension does


def _kept(rows: int, repeat: Repeat) -> int:
    """How many of this rank's leading rows are not repeats of another rank's samples: all but the last when they
    are the batch's per-sample rows (as many as its samples) and the last sample repeats, none of a repeated batch."""
    if repeat == "all":
        return 0
    return rows - 1 if repeat is not None and rows == repeat else rows


def _ordered(parts: list[Any], kept: list[int], interleave: bool) -> list[Any]:
    """Each rank's kept rows, rank after rank, or row position after row position (``interleave``: rank ``r``'s row
    ``j`` is sample ``j * world_size + r`` of the batch's draw, so this is the sampler's order)."""
    if not interleave:
        return [part[:k] for part, k in zip(parts, kept, strict=True)]
    width = max(kept, default=0)
    return [parts[r][j:j + 1] for j in range(width) for r in range(len(parts)) if j < kept[r]]


def signatures(strategy: Strategy, tensor: torch.Tensor, *, method: str, rows_may_differ: bool,
               kept: int = 0) -> torch.Tensor:
    """Every rank's ``[ndim, dtype, row size, kept, *shape]`` (one small collective), after checking that the ranks'
    tensors can be gathered: gloo crashes on sizes that differ, and on shapes or dtypes that differ with the same
    byte count it returns another rank's memory reinterpreted. A mismatch is a ConfigError on every rank alike."""
    dims = list(tensor.shape)[:_DIMS]
    dtype = zlib.crc32(str(tensor.dtype).encode()) & 0x7FFFFFFF
    mine = torch.tensor([tensor.ndim, dtype, math.prod(tensor.shape[1:]), kept, *dims, *[-1] * (_DIMS - len(dims))],
                        device=tensor.device)
    every = strategy.all_gather(mine)
    compared = [0, 1, 2, *range(5 if rows_may_differ else 4, 4 + _DIMS)]
    if not bool((every[:, compared] == every[0, compared]).all()):
        seen = ", ".join(f"rank {r} {tuple(row[4:4 + min(int(row[0]), _DIMS)].tolist())}" for r, row in enumerate(every))
        dtypes = "" if bool((every[:, 1] == every[0, 1]).all()) else f"; their dtypes differ (this rank's: {tensor.dtype})"
        what = "another size than the first" if rows_may_differ else "the same shape"
        raise ConfigError("tensor", tuple(tensor.shape), f"differs between the ranks ({seen}{dtypes}), and "
                          f"engine.{method} needs {'every dimension but the first alike' if rows_may_differ else what} "
                          "and one dtype on every rank.",
                          fix="engine.pad_across_processes(t, dim=...) evens a dimension out; convert to one dtype "
                              "first (t.float()).")
    return every


def gather_rows(strategy: Strategy, data: Any, *, layout: Layout | None, repeat: Repeat) -> Any:
    """Every rank's tensors of ``data`` concatenated along their first dimension, repeated samples dropped.

    A 0-dim tensor (a batch's sum, say) is one row per rank and is never dropped: it holds real samples too.
    Tensors may differ in their first dimension between ranks (they are padded for the collective and cut back).
    Rows are interleaved only when every rank has as many of them and the ranks take every ``world_size``-th
    sample, i.e. when they are a batch's per-sample outputs.
    """

    def gather(tensor: torch.Tensor) -> torch.Tensor:
        t = tensor.reshape(1) if tensor.ndim == 0 else tensor
        rows = t.shape[0]
        every = signatures(strategy, t, method="gather_for_metrics", rows_may_differ=True,
                           kept=rows if tensor.ndim == 0 else _kept(rows, repeat))
        sizes, kept = every[:, 4].tolist(), every[:, 3].tolist()
        largest = max(sizes)
        if rows < largest:
            t = torch.cat([t, t.new_zeros((largest - rows, *t.shape[1:]))])
        stacked = strategy.all_gather(t.contiguous())
        if layout == "samples" and tensor.ndim > 0 and len(set(sizes)) == 1:
            wanted = torch.arange(largest).unsqueeze(1) < torch.tensor(kept).unsqueeze(0)  # (row, rank)
            return stacked.transpose(0, 1).flatten(0, 1)[wanted.flatten().to(stacked.device)]
        return torch.cat(_ordered(list(stacked), kept, interleave=False))

    return apply_to_tensors(data, gather)


def gather_objects(strategy: Strategy, data: Any, *, layout: Layout | None, repeat: Repeat) -> list[Any]:
    """Every rank's picklable ``data``: lists and tuples are joined (repeated samples dropped, rows interleaved as
    in :func:`gather_rows`); anything else comes back as one entry per rank."""
    parts = strategy.all_gather_object(data)
    if not all(isinstance(p, (list, tuple)) for p in parts):
        return parts
    sizes = [len(p) for p in parts]
    kept = strategy.all_gather_object(_kept(len(data), repeat))
    interleave = layout == "samples" and len(set(sizes)) == 1
    return [item for part in _ordered([list(p) for p in parts], kept, interleave) for item in part]


def pad_to_largest(strategy: Strategy, data: Any, *, dim: int, pad_index: int | float, pad_first: bool) -> Any:
    """Pad each tensor of ``data`` along ``dim`` to the largest size any rank has there, so they can be gathered.

    Every rank takes part for every tensor (a rank that skipped one would leave the others waiting); a tensor
    without dimension ``dim`` on any rank, or a fractional ``pad_index`` for integers, is a ConfigError instead.
    """

    def pad(tensor: torch.Tensor) -> torch.Tensor:
        if not (tensor.is_floating_point() or tensor.is_complex()) and float(pad_index) != int(pad_index):
            raise ConfigError("pad_index", pad_index, f"is not a value of the tensor's dtype {tensor.dtype}, so it "
                              "would pad with its integer part.", fix="pass an integer pad_index, or pad a float "
                              "tensor (t.float()).")
        has = -tensor.ndim <= dim < tensor.ndim
        size = tensor.shape[dim % tensor.ndim] if has else -1
        every = strategy.all_gather(torch.tensor([tensor.ndim, size], device=tensor.device))
        if bool((every[:, 1] < 0).any()) or not bool((every[:, 0] == every[0, 0]).all()):
            shapes = ", ".join(f"rank {r}: {int(n)} dimension(s)" for r, (n, _) in enumerate(every.tolist()))
            raise ConfigError("dim", dim, f"is not a dimension of the tensor on every rank ({shapes}).",
                              fix="pad tensors that have that dimension on every rank (the same number of "
                                  "dimensions everywhere).")
        largest = int(every[:, 1].max().item())
        if size == largest:
            return tensor
        axis = dim % tensor.ndim
        widths = [0, 0] * (tensor.ndim - axis)
        widths[-2 if pad_first else -1] = largest - size
        return F.pad(tensor, widths, value=pad_index)

    return apply_to_tensors(data, pad)
