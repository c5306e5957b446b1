"""The named N-D device mesh of ``model_parallel``: its sizes checked against the world before anything starts, the
data-parallel rank of a process, and materializing a module built on the meta device shard by shard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
        choices = ["a positive int", "'auto'"] if argument != "tensor_parallel" else ["a positive int"]
        raise ConfigError(argument, value, "is not a mesh dimension size.", choices=choices,
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
                              fix=f"choose sizes whose product divides {world_size}, e.g. tensor_parallel=2 with "
                              "4 devices.")
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


def materialize(module: nn.Module, device: torch.device) -> int:
    """Allocate the meta tensors of ``module`` on ``device`` (only this rank's shards) and initialize them.

    Only submodules that own meta tensors are initialized (layers built outside the meta device keep their values);
    each must have ``reset_parameters()``: memory from ``to_empty`` is uninitialized, so a module that cannot
    initialize itself is refused rather than trained from garbage.

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
        for _, sub in on_meta:
            sub.reset_parameters()  # type: ignore[operator]
    return len(on_meta)
