"""DistributedDataParallel: one process per device, gradients all-reduced during the backward pass.

``training_step`` runs inside the DDP wrapper's ``forward`` (see :mod:`xtrain.strategies._internal.redirect`), so
DDP's gradient hooks fire for the parameters the step used. Evaluation steps call the module directly: they need
no gradient synchronization. Checkpoints hold the user's module's state (no ``module.`` prefix), so they load
under any strategy.

Registered names (all the same class family, differing in how processes start):

* ``ddp``: re-executes the script for the other ranks (the default for several devices or nodes);
* ``ddp_spawn``: ``torch.multiprocessing`` spawn; the caller gets the trained state back;
* ``ddp_fork`` / ``ddp_notebook``: fork; works in notebooks and REPLs;
* ``*_find_unused_parameters_true``: the same with ``find_unused_parameters=True``.

Under manual optimization (``automatic_optimization = False``) the backward runs inside ``training_step``, where
DDP's reducer cannot follow it; the step then runs on the module and each ``manual_backward`` averages the gradients
with one flattened all-reduce (linear, so several backward passes per step still sum correctly).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, ClassVar, Literal

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.core.launcher import Launcher
from xtrain.core.parallel import ParallelStrategy
from xtrain.core.strategy import StepName
from xtrain.strategies._internal.averaging import broadcast_from_zero
from xtrain.strategies._internal.caller_failure import report_caller_failure
from xtrain.strategies._internal.gradients import all_reduce_gradients
from xtrain.strategies._internal.redirect import StepRedirect, call_step
from xtrain.strategies.launchers import ForkLauncher, MultiprocessingLauncher, SubprocessScriptLauncher

__all__ = [
    "DDPForkStrategy", "DDPNotebookStrategy", "DDPSpawnStrategy", "DDPStrategy", "StartMethod",
    "ddp_find_unused_parameters_true", "ddp_fork_find_unused_parameters_true",
    "ddp_notebook_find_unused_parameters_true", "ddp_spawn_find_unused_parameters_true",
]

StartMethod = Literal["popen", "spawn", "fork"]
_SYNC_BUFFERS = ("forward_sync_buffers" if "forward_sync_buffers" in
                 inspect.signature(DistributedDataParallel.__init__).parameters else "broadcast_buffers")


class DDPStrategy(ParallelStrategy):
    """Data-parallel training with ``torch.nn.parallel.DistributedDataParallel``.

    Args:
        start_method: How the other ranks start: ``"popen"`` (re-run the command), ``"spawn"`` or ``"fork"``.
            Ignored when a cluster (torchrun, SLURM, mpirun) started them already.
        find_unused_parameters: Let DDP handle parameters that get no gradient in a step (costs a graph walk).
        static_graph: Tell DDP the set of used parameters never changes (enables some optimizations).
        gradient_as_bucket_view: Let gradients alias DDP's communication buckets (saves memory).
        bucket_cap_mb: DDP's bucket size.
        broadcast_buffers: Broadcast rank 0's buffers (e.g. BatchNorm statistics) at every forward.
        comm_hook: A DDP communication hook (``torch.distributed.algorithms.ddp_comm_hooks``), with its state.
        comm_hook_state: The state passed to ``comm_hook``.
        **kwargs: ``process_group_backend``, ``timeout``, ``heartbeat_timeout`` and plugins, as for
            :class:`~xtrain.core.parallel.ParallelStrategy`.
    """

    name: ClassVar[str] = "ddp"
    default_start_method: ClassVar[StartMethod] = "popen"

    def __init__(self, *, start_method: StartMethod | None = None, find_unused_parameters: bool = False,
                 static_graph: bool = False, gradient_as_bucket_view: bool = False, bucket_cap_mb: float | None = None,
                 broadcast_buffers: bool = True, comm_hook: Any = None, comm_hook_state: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        method = start_method or self.default_start_method
        if method not in ("popen", "spawn", "fork"):
            raise ConfigError("start_method", method, "is not a DDP start method.", choices=["popen", "spawn", "fork"],
                              fix="write start_method='popen' (the default), or pick strategy='ddp_spawn'.")
        self.start_method: StartMethod = method
        self.find_unused_parameters = find_unused_parameters
        self.static_graph = static_graph
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.bucket_cap_mb = bucket_cap_mb
        self.broadcast_buffers = broadcast_buffers
        self.comm_hook = comm_hook
        self.comm_hook_state = comm_hook_state
        self._launcher: Launcher | None = None
        self._manual_step = False
        self._sync_manual = True

    # -- launching ----------------------------------------------------------------------------------------------
    @property
    @override
    def launcher(self) -> Launcher | None:
        if self._launcher is not None:
            return self._launcher
        if self._cluster_environment is None or self.environment.creates_processes_externally:
            return None
        options: dict[str, Any] = {"num_processes": len(self.parallel_devices), "num_nodes": self.num_nodes,
                                   "environment": self.environment}
        if self.start_method == "popen":
            self._launcher = SubprocessScriptLauncher(**options)
        elif self.start_method == "fork":
            self._launcher = ForkLauncher(**options)
        else:
            self._launcher = MultiprocessingLauncher(**options)
        return self._launcher

    # -- the module ---------------------------------------------------------------------------------------------
    @override
    def wrap_module(self, module: nn.Module) -> nn.Module:
        device = self.root_device
        ids = [device.index] if device.type != "cpu" and device.index is not None else None
        options: dict[str, Any] = {"find_unused_parameters": self.find_unused_parameters,
                                   "static_graph": self.static_graph,
                                   "gradient_as_bucket_view": self.gradient_as_bucket_view,
                                   "bucket_cap_mb": self.bucket_cap_mb}
        # torch 2.13 renamed broadcast_buffers (and warns on it); older releases only know the old name.
        options[_SYNC_BUFFERS] = self.broadcast_buffers
        model = DistributedDataParallel(StepRedirect(module), device_ids=ids, output_device=ids[0] if ids else None,
                                        **options)
        if self.comm_hook is not None:
            model.register_comm_hook(self.comm_hook_state, self.comm_hook)
        return model

    @override
    def run_step(self, name: StepName, *args: Any, **kwargs: Any) -> Any:
        if name != "training_step" or not torch.is_grad_enabled():
            return super().run_step(name, *args, **kwargs)
        if not self.module.automatic_optimization:  # type: ignore[attr-defined]
            # manual_backward runs inside training_step, where DDP's reducer cannot follow it: the step runs on
            # the module and backward() averages the gradients itself.
            self._manual_step = True
            try:
                return super().run_step(name, *args, **kwargs)
            finally:
                self._manual_step = False
        if not self.precision.has_forward_context:
            return call_step(self.model, name, *args, **kwargs)
        with self.precision.forward_context():
            return call_step(self.model, name, *args, **kwargs)

    @override
    def before_fit_validation(self) -> None:
        # DDP broadcasts buffers at each forward in training; validation calls the module itself, so without this a
        # rank validates with its own BatchNorm statistics (rank 0's plus its last batch's update).
        if self.broadcast_buffers and self.world_size > 1 and isinstance(self._model, DistributedDataParallel):
            broadcast_from_zero(list(self.module.buffers()))

    @override
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        self.precision.backward(loss, *args, **kwargs)
        if self._manual_step and self._sync_manual and self.world_size > 1:
            # Linear, so several manual_backward calls per step still add up to the averaged sum.
            all_reduce_gradients(self.module.parameters(), self.world_size)

    @override
    def no_backward_sync(self, enabled: bool = True, *, module: nn.Module | None = None) -> AbstractContextManager[Any]:
        model = module if module is not None else self._model
        if enabled and isinstance(model, DistributedDataParallel):
            return model.no_sync()
        return nullcontext()

    @contextmanager
    def manual_no_sync(self) -> Iterator[None]:
        """Under manual optimization, skip the gradient averaging of ``manual_backward`` (accumulate locally)."""
        self._sync_manual = False
        try:
            yield
        finally:
            self._sync_manual = True

    @override
    def on_exception(self, exception: BaseException) -> None:
        report_caller_failure(self._launcher, exception)
        super().on_exception(exception)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(start_method={self.start_method!r})"


class DDPSpawnStrategy(DDPStrategy):
    """DDP whose ranks are started with ``torch.multiprocessing`` spawn; the caller gets the trained state back."""

    name: ClassVar[str] = "ddp_spawn"
    default_start_method: ClassVar[StartMethod] = "spawn"


class DDPForkStrategy(DDPStrategy):
    """DDP whose ranks are forked from the caller (no pickling, no ``__main__`` guard; not with CUDA initialized)."""

    name: ClassVar[str] = "ddp_fork"
    default_start_method: ClassVar[StartMethod] = "fork"


class DDPNotebookStrategy(DDPForkStrategy):
    """DDP for Jupyter and REPLs: forks the ranks, since there is no script to re-run."""

    name: ClassVar[str] = "ddp_notebook"


def ddp_find_unused_parameters_true() -> DDPStrategy:
    """``ddp`` with ``find_unused_parameters=True``."""
    return DDPStrategy(find_unused_parameters=True)


def ddp_spawn_find_unused_parameters_true() -> DDPStrategy:
    """``ddp_spawn`` with ``find_unused_parameters=True``."""
    return DDPSpawnStrategy(find_unused_parameters=True)


def ddp_fork_find_unused_parameters_true() -> DDPStrategy:
    """``ddp_fork`` with ``find_unused_parameters=True``."""
    return DDPForkStrategy(find_unused_parameters=True)


def ddp_notebook_find_unused_parameters_true() -> DDPStrategy:
    """``ddp_notebook`` with ``find_unused_parameters=True``."""
    return DDPNotebookStrategy(find_unused_parameters=True)
