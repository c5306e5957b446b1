"""Whether the chunks of a sharded tensor tile it exactly: every element read once, none twice, none never.

A DCP checkpoint stores each tensor as N-D boxes (offsets, sizes), one per shard; sharding may split several dims
(tensor parallel x FSDP). A reader that trusts the boxes reads overlapping ones twice and leaves the elements no box
covers as whatever the destination held. Boxes inside the tensor whose volumes sum to its element count tile it
exactly when they are also pairwise disjoint, which is checked here on the grid their edges cut the tensor into:
each box adds one to the grid cells it spans (a difference array, prefix-summed once), and every cell must end at one.

Only the dims some box splits take part (a dim every box spans whole, a size-1 dim above all, changes nothing).
Real layouts are products of per-dim splits along one to three dims (FSDP, tensor parallel, expert parallel), so
the grid has about as many cells as there are boxes. A tensor split along more than ``MAX_SPLIT_DIMS`` dims, or
whose grid (the difference array: one more point than cells along each dim) is far larger than its box count, is
refused rather than checked: that bounds the work and memory a crafted file can cause (a box adds at each of its
``2**dims`` corners), which would otherwise double with every dim it declares.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch

__all__ = ["MAX_SPLIT_DIMS", "tiling_problem"]

MAX_SPLIT_DIMS = 6
"""The most dims a tensor's chunks may split it along (each box adds at ``2**dims`` corners of the grid)."""

_MAX_CELLS_PER_BOX = 16
_MIN_CELLS = 4096

_OVERLAP = "overlap: {n} chunks hold the element at {at}, so others are never read"
_GAP = "leave the element at {at} unread"

Box = tuple[Sequence[int], Sequence[int]]


def tiling_problem(shape: Sequence[int], boxes: Sequence[Box]) -> str | None:
    """What keeps ``boxes`` (``(offsets, sizes)``, each already checked to lie inside ``shape``) from tiling a tensor
    of ``shape`` exactly, in words for an error message; ``None`` when they tile it."""
    numel = math.prod(shape)
    volume = sum(math.prod(sizes) for _, sizes in boxes)
    if volume != numel:
        return f"cover {volume} of its {numel} elements (the rest would be uninitialized memory)"
    solid = [(tuple(o), tuple(s)) for o, s in boxes if math.prod(s)]
    if len(solid) <= 1:  # one box inside the tensor with its whole volume is the tensor
        return None
    split = [d for d, dim in enumerate(shape) if any(s[d] != dim for _, s in solid)]
    if len(split) == 1:
        return _split_problem(shape, solid, split[0])
    if len(split) > MAX_SPLIT_DIMS:
        return (f"are split along {len(split)} of its dims, more than the {MAX_SPLIT_DIMS} xtrain checks (no "
                f"sharding splits a tensor along more than a few)")
    if not split:  # boxes each the whole tensor: the volume check above already refused two of them
        return _OVERLAP.format(n=len(solid), at=[0] * len(shape))
    return _grid_problem([shape[d] for d in split], [([o[d] for d in split], [z[d] for d in split]) for o, z in solid],
                         split, len(shape))


def _split_problem(shape: Sequence[int], solid: list[tuple[tuple[int, ...], tuple[int, ...]]], dim: int) -> str | None:
    """Boxes that split only ``dim`` (FSDP's layout): sorted along it, each must start where the previous ended."""
    reach = 0
    for start, size in sorted((o[dim], s[dim]) for o, s in solid):
        if start != reach:
            at = [0] * len(shape)
            at[dim] = min(start, reach)
            return _OVERLAP.format(n=2, at=at) if start < reach else _GAP.format(at=at)
        reach = start + size
    return None


def _grid_problem(shape: Sequence[int], solid: Sequence[Box], dims: Sequence[int], ndim: int) -> str | None:
    """Boxes that split several dims: counted on the grid their edges cut the tensor into.

    ``shape`` and ``solid`` are the tensor and boxes projected onto the dims some box splits (``dims`` of the
    tensor's ``ndim``); a place found is reported in the tensor's own coordinates.
    """
    offsets = torch.tensor([o for o, _ in solid], dtype=torch.int64).T.contiguous()
    ends = offsets + torch.tensor([s for _, s in solid], dtype=torch.int64).T
    cuts = [torch.unique(torch.cat([offsets[d], ends[d], torch.tensor([0, dim])])) for d, dim in enumerate(shape)]
    cells = math.prod(len(c) - 1 for c in cuts)
    if math.prod(len(c) for c in cuts) > max(_MAX_CELLS_PER_BOX * len(solid), _MIN_CELLS):
        return (f"are {len(solid)} chunks laid out so irregularly that their edges cut it into {cells} pieces, which "
                f"no sharding writes")
    first = [torch.searchsorted(c, offsets[d]) for d, c in enumerate(cuts)]
    last = [torch.searchsorted(c, ends[d]) for d, c in enumerate(cuts)]
    diff = torch.zeros([len(c) for c in cuts], dtype=torch.int64)
    ones = torch.ones(len(solid), dtype=torch.int64)
    for corner in itertools.product((False, True), repeat=len(shape)):
        index = tuple(last[d] if at_end else first[d] for d, at_end in enumerate(corner))
        diff.index_put_(index, ones if sum(corner) % 2 == 0 else -ones, accumulate=True)
    for d in range(len(shape)):
        diff = diff.cumsum(d)
    count = diff[tuple(slice(0, -1) for _ in shape)]
    for wrong, what in ((count > 1, _OVERLAP), (count != 1, _GAP)):
        found = wrong.nonzero()
        if len(found):
            cell = tuple(int(i) for i in found[0])
            at = [0] * ndim
            for d, i in enumerate(cell):
                at[dims[d]] = int(cuts[d][i])
            return what.format(n=int(count[cell]), at=at)
    return None
