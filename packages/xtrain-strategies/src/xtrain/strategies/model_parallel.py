"""Model parallelism on a named N-D device mesh: data-parallel replication, sharding (FSDP2) and tensor parallelism
composed the way torchtitan does it, with torch's own APIs.

The strategy builds the mesh (dimensions ``data_parallel_replicate``, ``data_parallel_shard``, ``tensor_parallel``,
outermost first) after the processes start. The user's :meth:`~xtrain.core.TrainModule.configure_model` receives it
as ``self.device_mesh`` and applies ``parallelize_module`` (``ColwiseParallel``, ``RowwiseParallel``,
``SequenceParallel``) and ``fully_shard`` with sub-meshes. Layers created inside ``configure_model`` are built on the
meta device and materialized shard by shard, so no process ever holds the whole model. What the user leaves
unsharded the strategy shards over the data-parallel dimensions (both of them: HSDP, replicate x shard).

Checkpoints are the same DCP directories as ``fsdp``'s (or single files with ``state_dict_type="full"``), so they
move between mesh shapes, to ``fsdp``, ``ddp`` or one device, and ``xtrain checkpoint consolidate`` reads them.

Registered names: ``model_parallel``, and ``hsdp`` (replicate across nodes, shard within a node, no tensor
parallelism: with one node it is ``fsdp``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from typing import Any, ClassVar, Literal

import torch
from torch import nn
from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.core.strategy import ReduceOp, StepName, Strategy
from xtrain.strategies._internal import fsdp_setup
from xtrain.strategies._internal.fsdp_setup import ModuleSelector
from xtrain.strategies._internal.mesh import DIM_NAMES, MeshSizes, Size, check_size, materialize, resolve_sizes
from xtrain.strategies._internal.tp_clip import clip_grad_norm_across_meshes
from xtrain.strategies.fsdp import FSDPStrategy, StateDictType

__all__ = ["ModelParallelStrategy", "hsdp"]

Parallelize = Callable[[nn.Module, Any], nn.Module | None]


class ModelParallelStrategy(FSDPStrategy):
    """Tensor parallelism, sharding and replication on one named device mesh.

    Args:
        data_parallel_replicate: Replicas of the (sharded) model; ``"auto"``: one per node.
        data_parallel_shard: Processes each replica is sharded over; ``"auto"``: what the world size leaves.
        tensor_parallel: Processes each layer is split over (``parallelize_module`` in ``configure_model``).
        parallelize: For the Engine (which has no ``configure_model``): ``fn(module, mesh)`` that parallelizes
            the module in place (or returns its replacement).
        compile: Submodules (by class, class name or predicate) compiled one by one with ``torch.compile``
            after parallelizing: per-block compilation compiles one block's code once for all blocks.
        compile_kwargs: Keyword arguments for ``torch.compile`` (``backend``, ``mode``, ``fullgraph``...).
        activation_checkpointing: Submodules whose activations are recomputed in backward.
        state_dict_type: ``"sharded"`` (DCP directories, default) or ``"full"`` (one file from rank 0).
        async_save: Write sharded checkpoints in the background.
        **kwargs: ``process_group_backend``, ``timeout`` and plugins, as for other process-group strategies.
    """

    name: ClassVar[str] = "model_parallel"
    supported_precisions: ClassVar[frozenset[str] | None] = frozenset({"32-true", "bf16-true", "bf16-mixed"})

    def __init__(self, *, data_parallel_replicate: Size = 1, data_parallel_shard: Size = "auto",
                 tensor_parallel: int = 1, parallelize: Parallelize | None = None,
                 compile: ModuleSelector | None = None, compile_kwargs: dict[str, Any] | None = None,
                 activation_checkpointing: ModuleSelector | None = None,
                 state_dict_type: StateDictType = "sharded", async_save: bool = False, **kwargs: Any) -> None:
        super().__init__(activation_checkpointing=activation_checkpointing, state_dict_type=state_dict_type,
                         async_save=async_save, **kwargs)
        check_size("data_parallel_replicate", data_parallel_replicate)
        check_size("data_parallel_shard", data_parallel_shard)
        check_size("tensor_parallel", tensor_parallel)
        fsdp_setup.check_selector("compile", compile)
        if parallelize is not None and not callable(parallelize):
            raise ConfigError("parallelize", parallelize, "is not callable.",
                              fix="pass a function fn(module, mesh) that applies parallelize_module/fully_shard.")
        self._sizes_asked = (data_parallel_replicate, data_parallel_shard, tensor_parallel)
        self.parallelize = parallelize
        self.compile = compile
        self.compile_kwargs = dict(compile_kwargs or {})
        self._sizes: MeshSizes | None = None
        self._data_parallel_group: Any = None

    @property
    def mesh_sizes(self) -> MeshSizes:
        """The mesh's sizes, known once the world size is (after the Trainer resolved its arguments)."""
        if self._sizes is None:
            replicate, shard, tp = self._sizes_asked
            self._sizes = resolve_sizes(world_size=self.world_size_planned, data_parallel_replicate=replicate,
                                        data_parallel_shard=shard, tensor_parallel=tp, num_nodes=self.num_nodes)
        return self._sizes

    @property
    def world_size_planned(self) -> int:
        return len(self.parallel_devices) * self.num_nodes

    @override
    def check_config(self) -> None:
        super().check_config()
        _ = self.mesh_sizes

    @property
    @override
    def device_mesh(self) -> Any:
        """The named mesh (``mesh["tensor_parallel"]``, ``mesh["data_parallel_replicate", "data_parallel_shard"]``);
        built when the processes start."""
        return self._mesh

    @property
    @override
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        sizes = self.mesh_sizes
        return {"num_replicas": sizes.data_parallel, "rank": sizes.data_parallel_rank(self.global_rank)}

    @override
    def _build_mesh(self) -> Any:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(self.root_device.type, self.mesh_sizes.shape, mesh_dim_names=DIM_NAMES)
        if self.mesh_sizes.tensor_parallel > 1:
            # Built here, while every rank builds the mesh: creating a process group is itself collective, and a
            # metric reduction (rank-dependent in when it first happens) is no place for it.
            self._data_parallel_group = mesh[DIM_NAMES[:2]]._flatten("data_parallel").get_group()
        return mesh

    @override
    def module_init_context(self) -> AbstractContextManager[Any]:
        """Layers created in ``configure_model`` (or under ``Trainer.init_module``) go on the meta device: only
        each rank's shards are ever allocated."""
        stack = ExitStack()
        stack.enter_context(self.precision.module_init_context())
        stack.enter_context(torch.device("meta"))
        return stack

    # -- the module ------------------------------------------------------------------------------------------------
    @override
    def setup(self, module: nn.Module) -> nn.Module:
        from torch.distributed.fsdp import FSDPModule, fully_shard
        from torch.distributed.tensor import DTensor

        sizes, mesh = self.mesh_sizes, self._mesh
        if self.parallelize is not None:
            module = self.parallelize(module, mesh) or module
        # A parameter on the tensor-parallel dimension: fully_shard on the data-parallel mesh alone makes DTensors
        # too, and the ranks of a tensor-parallel group would then each compute the whole model.
        if sizes.tensor_parallel > 1 and not any(
                isinstance(p, DTensor) and DIM_NAMES[2] in (p.device_mesh.mesh_dim_names or ())
                for p in module.parameters()):
            raise ConfigError("tensor_parallel", sizes.tensor_parallel, f"needs a module that "
                              f"{type(module).__name__}.configure_model() parallelizes, but no parameter was "
                              "distributed over the tensor-parallel mesh dimension.", fix="in configure_model, "
                              "call parallelize_module(block, "
                              "self.device_mesh['tensor_parallel'], plan) for each block (see the model-parallel "
                              "guide), or use tensor_parallel=1.")
        module = self.precision.convert_module(module)
        if self.activation_checkpointing is not None:
            fsdp_setup.activation_checkpoint(module, self.activation_checkpointing)
        if sizes.data_parallel > 1 and not isinstance(module, FSDPModule):
            dims = [n for n, s in zip(DIM_NAMES[:2], sizes.shape[:2], strict=True) if s > 1]
            fully_shard(module, mesh=mesh[tuple(dims)] if len(dims) > 1 else mesh[dims[0]],
                        mp_policy=fsdp_setup.mixed_precision_policy(self.precision))
        materialize(module, self.root_device)
        if self.compile is not None:
            for unit in fsdp_setup.units_to_shard(module, policy=self.compile, min_num_params=None):
                unit.compile(**self.compile_kwargs)
        self._names_before[id(module)] = fsdp_setup.param_names(module)
        self._module = self._model = module
        self._modules.append(module)
        return module

    @override
    def run_step(self, name: StepName, *args: Any, **kwargs: Any) -> Any:
        return Strategy.run_step(self, name, *args, **kwargs)

    @override
    def clip_gradients(self, optimizer: torch.optim.Optimizer, *, value: float,
                       algorithm: Literal["norm", "value"] = "norm") -> torch.Tensor | None:
        """Clip after unscaling, as the base does; by norm, the norm is taken per device mesh and combined.

        ``clip_grad_norm_`` stacks the norms of all gradients, which fails when tensor-parallel parameters (on the
        whole mesh) sit beside the others (on the data-parallel sub-mesh); clipping by value is element-wise and
        needs nothing of the kind.
        """
        if algorithm == "value":
            return super().clip_gradients(optimizer, value=value, algorithm=algorithm)
        self.precision.unscale_gradients(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        return clip_grad_norm_across_meshes(params, value, device=self.root_device)

    @override
    def reduce_data_parallel(self, tensor: torch.Tensor, op: ReduceOp = "mean") -> torch.Tensor:
        """Reduce over the data-parallel ranks only (replicate x shard): the ranks of one tensor-parallel group
        share their batch, so reducing over every rank would count a summed metric once per tensor-parallel rank."""
        if self._data_parallel_group is None:  # no tensor parallelism: the data-parallel ranks are all of them
            return self.reduce(tensor, op)
        return self._reduce_in_group(tensor, op, group=self._data_parallel_group,
                                     label="all_reduce (over the data-parallel ranks)")

    def __repr__(self) -> str:
        sizes = dict(zip(DIM_NAMES, self._sizes.shape if self._sizes else self._sizes_asked, strict=True))
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in sizes.items())})"


def hsdp() -> ModelParallelStrategy:
    """Hybrid sharding: replicate across nodes, shard within a node."""
    return ModelParallelStrategy(data_parallel_replicate="auto", data_parallel_shard="auto")
