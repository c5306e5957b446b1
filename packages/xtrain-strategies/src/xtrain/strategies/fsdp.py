"""Fully sharded data parallel (FSDP2, ``torch.distributed.fsdp.fully_shard``): each rank keeps 1/world_size of
the parameters, gradients and optimizer state, and gathers a unit's parameters only while it runs.

The user's module is sharded in place (parameter names do not change) under a :class:`StepRedirect` root, so the
whole ``training_step`` (and the evaluation steps) run inside the root's forward: parameters the step touches are
gathered however the step reaches them, as with DDP. Processes are started by the same re-exec launcher as ``ddp``.

Checkpoints are sharded directories by default (every rank writes its shards, optionally in the background; see
:mod:`xtrain.core.sharded_checkpoint`), or single files with ``state_dict_type="full"``. Either loads under any
strategy and world size: this strategy reads directories straight into its shards and full files by slicing them.

Registered names: ``fsdp``, and ``fsdp_cpu_offload`` (the same with parameters and optimizer state in CPU memory).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, ClassVar, Literal

import torch
from torch import nn
from typing_extensions import override

from xtrain.core.checkpoint_io import PathLike
from xtrain.core.errors import ConfigError
from xtrain.core.launcher import Launcher
from xtrain.core.parallel import ParallelStrategy
from xtrain.core.sharded_checkpoint import copy_sharded_checkpoint, is_sharded, read_sharded_checkpoint
from xtrain.core.sharded_saver import ShardedSaver
from xtrain.core.state_dict import by_name
from xtrain.core.strategy import StepName
from xtrain.strategies._internal import fsdp_setup, fsdp_state
from xtrain.strategies._internal.caller_failure import report_caller_failure
from xtrain.strategies._internal.fsdp_setup import ModuleSelector
from xtrain.strategies._internal.redirect import StepRedirect, call_step
from xtrain.strategies.launchers import SubprocessScriptLauncher

__all__ = ["FSDPStrategy", "fsdp_cpu_offload"]

StateDictType = Literal["sharded", "full"]


class FSDPStrategy(ParallelStrategy):
    """Sharded data-parallel training with FSDP2.

    Args:
        auto_wrap_policy: Submodules to shard as their own units, by class (or class name) or a function
            ``module -> bool``; e.g. the transformer block class. Without units the whole model is one unit.
        min_num_params: Also make a unit of every submodule holding at least this many parameters not already in
            a unit below it.
        reshard_after_forward: Free gathered parameters after each unit's forward (``True``: least memory, they
            are gathered again for backward) or keep them (``False``: less communication). ``None``: FSDP's
            default (``True`` for units, ``False`` for the root).
        cpu_offload: Keep the sharded parameters, gradients and optimizer state in CPU memory (the optimizer steps
            on the CPU); for models whose shards do not fit on the device.
        activation_checkpointing: Submodules (by class, class name or predicate) whose activations are recomputed
            in backward instead of stored.
        state_dict_type: ``"sharded"``: checkpoints are directories every rank writes its shards to;
            ``"full"``: one file gathered on rank 0 (what single-device tools expect).
        async_save: Write sharded checkpoints in the background; training continues once the tensors are copied.
        **kwargs: ``process_group_backend``, ``timeout``, ``heartbeat_timeout`` and plugins, as for
            :class:`~xtrain.core.parallel.ParallelStrategy`.
    """

    name: ClassVar[str] = "fsdp"
    # Float64 training is not something FSDP's mixed-precision policy or its sharded collectives are built or
    # tested for in xtrain; refusing it up front beats an untested path.
    supported_precisions: ClassVar[frozenset[str] | None] = frozenset(
        {"32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"})
    # FSDP2 keeps the parameters it gathers in evaluation for the next forward: made under inference_mode, the first
    # training step's backward refuses them ("Inference tensors cannot be saved for backward").
    supports_inference_mode: ClassVar[bool] = False

    def __init__(self, *, auto_wrap_policy: ModuleSelector | None = None, min_num_params: int | None = None,
                 reshard_after_forward: bool | int | None = None, cpu_offload: bool = False,
                 activation_checkpointing: ModuleSelector | None = None, state_dict_type: StateDictType = "sharded",
                 async_save: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        fsdp_setup.check_selector("auto_wrap_policy", auto_wrap_policy)
        fsdp_setup.check_selector("activation_checkpointing", activation_checkpointing)
        if min_num_params is not None and (isinstance(min_num_params, bool) or not isinstance(min_num_params, int)
                                           or min_num_params < 1):
            raise ConfigError("min_num_params", min_num_params, "must be a positive int.",
                              fix="write min_num_params=1_000_000 to shard every submodule of a million parameters.")
        if state_dict_type not in ("sharded", "full"):
            raise ConfigError("state_dict_type", state_dict_type, "is not a checkpoint layout.",
                              choices=["sharded", "full"], fix="write state_dict_type='sharded' (the default).")
        if async_save and state_dict_type == "full":
            raise ConfigError("async_save", async_save, "applies to sharded checkpoints; full ones are one file "
                              "written by rank 0.", fix="use state_dict_type='sharded', or plugins=['async'] to "
                              "write full checkpoints in the background.")
        self.auto_wrap_policy = auto_wrap_policy
        self.min_num_params = min_num_params
        self.reshard_after_forward = reshard_after_forward
        self.cpu_offload = cpu_offload
        self.activation_checkpointing = activation_checkpointing
        self.checkpoint_layout = state_dict_type
        self._saver = ShardedSaver(self, async_save=async_save)
        self._launcher: Launcher | None = None
        self._mesh: Any = None
        self._modules: list[nn.Module] = []
        self._names_before: dict[int, fsdp_setup.Names] = {}
        self._optimizers: list[torch.optim.Optimizer] = []

    @property
    def async_save(self) -> bool:
        return self._saver.async_save

    def wait_for_checkpoint(self) -> None:
        """Block until a checkpoint being written in the background is complete (every rank calls it)."""
        self._saver.wait()

    # -- launching and the process group -------------------------------------------------------------------------
    @property
    @override
    def launcher(self) -> Launcher | None:
        if self._launcher is None and self._cluster_environment is not None and \
                not self.environment.creates_processes_externally:
            self._launcher = SubprocessScriptLauncher(num_processes=len(self.parallel_devices),
                                                      num_nodes=self.num_nodes, environment=self.environment,
                                                      strategy=self.name)
        return self._launcher

    @override
    def setup_environment(self) -> None:
        super().setup_environment()
        self._saver.setup()
        if self._mesh is None:
            self._mesh = self._build_mesh()

    def _build_mesh(self) -> Any:
        """The device mesh sharding runs on: one dimension over every process."""
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(self.root_device.type, (self.world_size,))

    @override
    def on_exception(self, exception: BaseException) -> None:
        report_caller_failure(self._launcher, exception)
        super().on_exception(exception)

    @override
    def teardown(self) -> None:
        self._saver.wait()
        super().teardown()

    # -- the module ------------------------------------------------------------------------------------------------
    @override
    def setup(self, module: nn.Module) -> nn.Module:
        from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

        if getattr(module, "automatic_optimization", True) is False:
            raise ConfigError("automatic_optimization", False, f"is not supported by strategy={self.name!r}: the "
                              "step runs inside FSDP's root forward, and a backward pass inside a forward skips "
                              "FSDP's gradient reduction.", choices=["True"],
                              fix="use automatic optimization (return the loss from training_step), or "
                              "strategy='ddp' for manual optimization.")
        module = self.precision.convert_module(module)
        if not self.cpu_offload:
            module = module.to(self.root_device)
        self._names_before[id(module)] = fsdp_setup.param_names(module)
        if self.activation_checkpointing is not None:
            fsdp_setup.activation_checkpoint(module, self.activation_checkpointing)
        options: dict[str, Any] = {
            "mesh": self._mesh, "reshard_after_forward": self.reshard_after_forward,
            "mp_policy": fsdp_setup.mixed_precision_policy(self.precision),
            # Pinned memory needs an accelerator; on a CPU-only machine offloading is a no-op that still works.
            "offload_policy": CPUOffloadPolicy(pin_memory=self.root_device.type != "cpu") if self.cpu_offload
            else OffloadPolicy(),
        }
        for unit in fsdp_setup.units_to_shard(module, policy=self.auto_wrap_policy,
                                              min_num_params=self.min_num_params):
            fully_shard(unit, **options)
        root = StepRedirect(module)
        fully_shard(root, **options)
        self._module, self._model = module, root
        self._modules.append(module)
        return root

    @override
    def setup_optimizers(self, optimizers: list[torch.optim.Optimizer]) -> list[torch.optim.Optimizer]:
        """Keep the optimizers (checkpoints read into their shards); repoint ones created before sharding."""
        modules = [(self._names_before[id(m)], dict(m.named_parameters())) for m in self._modules]
        for optimizer in optimizers:
            fsdp_setup.rebind_optimizer(optimizer, modules)
            if not any(optimizer is o for o in self._optimizers):
                self._optimizers.append(optimizer)
        return optimizers

    def _owner(self, optimizer: torch.optim.Optimizer) -> nn.Module:
        first = next((p for g in optimizer.param_groups for p in g["params"]), None)
        for module in self._modules:
            if any(p is first for p in module.parameters()):
                return module
        raise ConfigError("optimizer", type(optimizer).__name__, "does not optimize a module set up by "
                          f"strategy={self.name!r}.", fix="create it from the set-up module's parameters.")

    # -- the step path ---------------------------------------------------------------------------------------------
    @override
    def run_step(self, name: StepName, *args: Any, **kwargs: Any) -> Any:
        if not self.precision.has_forward_context:
            return call_step(self.model, name, *args, **kwargs)
        with self.precision.forward_context():
            return call_step(self.model, name, *args, **kwargs)

    @override
    def no_backward_sync(self, enabled: bool = True, *, module: nn.Module | None = None) -> AbstractContextManager[Any]:
        from torch.distributed.fsdp import FSDPModule

        model = module if module is not None else self._model
        if enabled and isinstance(model, FSDPModule):
            return _without_gradient_sync(model)
        return nullcontext()

    # -- checkpoint content ----------------------------------------------------------------------------------------
    @override
    def module_state_dict(self, *, module: nn.Module | None = None) -> dict[str, Any]:
        """Sharded (DTensor) entries, or with ``state_dict_type="full"`` full tensors on rank 0 (empty elsewhere)."""
        return fsdp_state.module_state(module if module is not None else self.module,
                                       full=self.checkpoint_layout == "full")

    @override
    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer, *,
                             module: nn.Module | None = None) -> dict[str, Any]:
        return fsdp_state.optimizer_state(module if module is not None else self._owner(optimizer), optimizer,
                                          full=self.checkpoint_layout == "full")

    @override
    def load_module_state_dict(self, state: dict[str, Any], *, strict: bool = True,
                               module: nn.Module | None = None) -> None:
        fsdp_state.load_module_state(module if module is not None else self.module, state, strict=strict)

    @override
    def load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, state: dict[str, Any], *,
                                  module: nn.Module | None = None) -> None:
        fsdp_state.load_optimizer_state(module if module is not None else self._owner(optimizer), optimizer, state)

    # -- checkpoint IO ---------------------------------------------------------------------------------------------
    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike) -> None:
        if self.checkpoint_layout == "full":
            super().save_checkpoint(checkpoint, path)
        else:
            self._saver.save(checkpoint, path)

    @override
    def copy_checkpoint(self, source: PathLike, destination: PathLike) -> None:
        if self.is_global_zero and (self._saver.pending(source) or is_sharded(source)):
            # A copy of a checkpoint still being written happens when it is complete, without blocking training.
            self._saver.when_written(source, lambda: copy_sharded_checkpoint(source, destination))
        else:
            super().copy_checkpoint(source, destination)

    @override
    def remove_checkpoint(self, path: PathLike) -> None:
        if self._saver.pending(path):
            self._saver.wait()
        super().remove_checkpoint(path)

    @override
    def load_checkpoint(self, path: PathLike, *, targets: dict[str, Any] | None = None) -> dict[str, Any]:
        """Full files load as they are; sharded directories (any world size) are read into this rank's shards.

        The shards are read into fresh tensors shaped like ``targets``' (or the set-up module's and optimizers'),
        never into the live ones: a checkpoint that turns out not to fit must leave the model as it was.
        """
        self._saver.wait()
        if not is_sharded(path):
            return super().load_checkpoint(path)
        if targets is None:
            targets = {"state_dict": self.module, "optimizer_states": self._optimizers} if self._modules else {}
        template = {key: fsdp_state.sharded_template(target, self._owner) for key, target in targets.items()}
        return read_sharded_checkpoint(path, template=fsdp_state.empty_like(template),
                                       verify=self.checkpoint_io.checksums)

    @override
    def restore_problems(self, checkpoint: dict[str, Any], *, fitting: bool) -> list[str]:
        states = checkpoint.get("optimizer_states") if fitting else None
        if not isinstance(states, list):
            return []
        return [f"optimizer_states[{i}]: keyed by parameter position, which cannot be matched to FSDP's shards "
                f"(resave it with xtrain, which keys it by name under every strategy)"
                for i, state in enumerate(states) if isinstance(state, dict) and by_name(state) is None]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(state_dict_type={self.checkpoint_layout!r}, cpu_offload={self.cpu_offload})"


def fsdp_cpu_offload() -> FSDPStrategy:
    """``fsdp`` with ``cpu_offload=True``."""
    return FSDPStrategy(cpu_offload=True)


@contextmanager
def _without_gradient_sync(model: Any) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)
