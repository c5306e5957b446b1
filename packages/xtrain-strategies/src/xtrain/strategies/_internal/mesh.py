"""The named N-D device mesh of ``model_parallel``: its sizes checked against the world before anything starts, the
data-parallel rank of a process, and materializing a module built on the meta device shard by shard.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from xtrain.core.errors import ConfigError

__all__ = ["DIM_NAMES", "MeshSizes", "materialize", "resolve_sizes"]

DIM_NAMES = ("data_parallel_replicate", "data_parallel_shard", "tensor_parallel")
Size = int | Literal["auto"]


@dataclass(frozen=True)
class MeshSizes:
    """Sizes of the mesh's dimensions, outermost first; their product is the world size."""

    data_parallel_replicate: int
    data_parallel_shard: int
    tensor_parallel: int

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.data_parallel_replicate, self.data_parallel_shard, self.tensor_parallel)

    @property
    def data_parallel(self) -> int:
        """How many different batches one step sees: replicas x shards."""
        return self.data_parallel_replicate * self.data_parallel_shard

    def data_parallel_rank(self, global_rank: int) -> int:
        """Ranks of one tensor-parallel group (consecutive ranks, the innermost dimension) see the same batch."""
        return global_rank // self.tensor_parallel


def check_size(argument: str, value: object) -> None:
    if value == "auto" and argument != "tensor_parallel":
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        if argument == "tensor_parallel":  # no 'auto': how far to split layers is the model's call, not the world's
            raise ConfigError(argument, value, "is not a mesh dimension size.", choices=["a positive int"],
                              fix="write tensor_parallel=2 (the processes each layer is split over; 1 for none).")
        raise ConfigError(argument, value, "is not a mesh dimension size.", choices=["a positive int", "'auto'"],
                          fix=f"write {argument}=2 (or 'auto' to take what the world size leaves).")


def resolve_sizes(*, world_size: int, data_parallel_replicate: Size, data_parallel_shard: Size,
                  tensor_parallel: int, num_nodes: int) -> MeshSizes:
    """Fill in ``"auto"`` sizes and check that the mesh covers exactly ``world_size`` processes.

    ``data_parallel_replicate="auto"`` replicates across nodes (HSDP's usual layout: sharding traffic stays inside a
    node); ``data_parallel_shard="auto"`` takes the rest.
    """
    replicate = num_nodes if data_parallel_replicate == "auto" else data_parallel_replicate
    fixed = replicate * tensor_parallel
    if data_parallel_shard == "auto":
        if world_size % fixed:
            raise ConfigError("tensor_parallel", tensor_parallel, f"times data_parallel_replicate={replicate} is "
                              f"{fixed}, which does not divide the world size {world_size} (devices x num_nodes).",
                              fix=f"make data_parallel_replicate x tensor_parallel divide {world_size}, e.g. "
                              f"{_dividing_sizes(world_size, replicate, tensor_parallel)}.")
        shard = world_size // fixed
    else:
        shard = data_parallel_shard
    sizes = MeshSizes(replicate, shard, tensor_parallel)
    if replicate * shard * tensor_parallel != world_size:
        raise ConfigError("data_parallel_shard", data_parallel_shard, f"gives a mesh of {sizes.shape} = "
                          f"{replicate * shard * tensor_parallel} processes, but the world has {world_size} "
                          "(devices x num_nodes).", fix="make data_parallel_replicate x data_parallel_shard x "
                          f"tensor_parallel = {world_size}, or leave data_parallel_shard='auto'.")
    return sizes


def _dividing_sizes(world_size: int, replicate: int, tensor_parallel: int) -> str:
    """Sizes near the ones asked whose product divides ``world_size``: keep one of the two and lower the other to the
    largest size that fits, so the example in the message always works for this world."""
    def largest_fitting(limit: int, rest: int) -> int:
        return max(d for d in range(1, min(limit, rest) + 1) if rest % d == 0)

    options = []
    if world_size % replicate == 0:
        options.append((replicate, largest_fitting(tensor_parallel, world_size // replicate)))
    if world_size % tensor_parallel == 0:
        options.append((largest_fitting(replicate, world_size // tensor_parallel), tensor_parallel))
    if not options:
        options.append((1, largest_fitting(tensor_parallel, world_size)))
    return " or ".join(dict.fromkeys(f"data_parallel_replicate={r} with tensor_parallel={t}" for r, t in options))


def materialize(module: nn.Module, device: torch.device) -> int:
    """Allocate the meta tensors of ``module`` on ``device`` (only this rank's shards) and initialize them.

    Only submodules that own meta tensors are initialized (layers built outside the meta device keep their values);
    each must have ``reset_parameters()``: memory from ``to_empty`` is uninitialized, so a module that cannot
    initialize itself is refused rather than trained from garbage.

    Where DTensor's random ops cannot draw a correct sharded init (CPU meshes), each such submodule is drawn whole,
    the same on every rank, and sliced: the assembled model is what ``reset_parameters`` gives the unsharded one.
    On CUDA meshes each rank draws only its shards (DTensor's offset-based generator), never a whole tensor.

    Returns:
        How many submodules were initialized (0 when nothing was on the meta device).
    """
    on_meta = [(name, m) for name, m in module.named_modules()
               if any(t.is_meta for t in [*m.parameters(recurse=False), *m.buffers(recurse=False)])]
    if not on_meta:
        return 0
    lacking = [f"{name or '<root>'} ({type(m).__name__})" for name, m in on_meta
               if not callable(getattr(m, "reset_parameters", None))]
    if lacking:
        raise ConfigError("configure_model", "modules built on the meta device", "cannot be initialized: "
                          f"{', '.join(lacking[:5])} own parameters or buffers but have no reset_parameters().",
                          fix="give those modules a reset_parameters() method, or create them outside the meta "
                          "device (in __init__).")
    # to_empty reallocates every tensor (FSDP keeps its bookkeeping only through the root's), so the ones that
    # already held values are copied back: only their local shards, never a whole model.
    kept = {name: t.detach().clone() for name, t in [*module.named_parameters(), *module.named_buffers()]
            if not t.is_meta}
    module.to_empty(device=device)
    with torch.no_grad():
        for name, t in [*module.named_parameters(), *module.named_buffers()]:
            if name in kept:
                t.copy_(kept[name])
        whole = [_needs_whole_draw(sub) for _, sub in on_meta]
        with _rank_zero_rng() if any(whole) else nullcontext():
            for (_, sub), draw_whole in zip(on_meta, whole, strict=True):
                if draw_whole:
                    _reset_whole_then_shard(sub)
                else:
                    sub.reset_parameters()
    return len(on_meta)


def _own_dtensors(module: nn.Module) -> list[tuple[dict[str, Any], str, Any]]:
    """``(store, name, tensor)`` for the DTensor parameters and buffers ``module`` owns (not its children's)."""
    from torch.distributed.tensor import DTensor

    stores: list[dict[str, Any]] = [module._parameters, module._buffers]
    return [(store, name, t) for store in stores for name, t in store.items() if isinstance(t, DTensor)]


def _needs_whole_draw(module: nn.Module) -> bool:
    """Whether ``module``'s DTensors live on a mesh whose devices DTensor's random ops cannot shard correctly.

    On CUDA(-like) meshes DTensor draws each shard at its offset of one global random stream: a correct sharded
    init. Elsewhere (CPU meshes) every rank draws its local shard from its own generator, and with the usual equal
    seeds every shard is the same numbers: tensor-parallel heads and FSDP shards start (and stay) copies.
    """
    from torch.distributed.tensor._random import is_rng_supported_mesh

    own = _own_dtensors(module)
    if not own:
        return False
    with warnings.catch_warnings():  # is_rng_supported_mesh warns for the very meshes it is asked about
        warnings.simplefilter("ignore")
        return not all(is_rng_supported_mesh(t.device_mesh) for _, _, t in own)


@contextmanager
def _rank_zero_rng() -> Iterator[None]:
    """Draw with rank 0's CPU generator: every rank must draw the same whole tensors, or replicated parameters differ
    between ranks and shards do not fit together.

    With equal seeds (``seed_everything``) the generators already agree and are used as they are, so the draws and
    what follows match one process seeded the same way. Unseeded ranks draw from a copy of rank 0's state and keep
    their own generators.
    """
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        yield
        return
    state = torch.get_rng_state()
    agreed = state.clone()
    dist.broadcast(agreed, src=0)
    if torch.equal(state, agreed):
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(agreed)
        yield


def _reset_whole_then_shard(module: nn.Module) -> None:
    """Initialize ``module``'s DTensors as whole tensors and keep this rank's shards.

    ``reset_parameters()`` runs on plain full-size stand-ins (one module at a time: memory is bounded by the largest
    module, not the model), so it draws exactly what it would for an unsharded module; each rank then slices its
    local shard out without communication (``distribute_tensor(..., src_data_rank=None)``).
    """
    from torch.distributed.tensor import distribute_tensor

    own = _own_dtensors(module)
    for store, name, sharded in own:
        whole = torch.empty(sharded.shape, dtype=sharded.dtype, device=sharded.to_local().device)
        store[name] = nn.Parameter(whole, requires_grad=sharded.requires_grad) \
            if isinstance(sharded, nn.Parameter) else whole
    try:
        module.reset_parameters()  # type: ignore[operator]
        for store, name, sharded in own:
            shard = distribute_tensor(store[name].detach(), sharded.device_mesh, sharded.placements,
                                      src_data_rank=None)
            if shard.to_local().shape != sharded.to_local().shape:
                raise RuntimeError(f"{type(module).__name__}.{name}: the shard sliced from the whole tensor has "
                                   f"shape {tuple(shard.to_local().shape)}, but this rank holds "
                                   f"{tuple(sharded.to_local().shape)} ({sharded.placements}).")
            sharded.copy_(shard)
    finally:
        for store, name, sharded in own:
            store[name] = sharded
