"""The Strategy contract: the one object the Trainer, the Engine, the loops and every callback talk to.

A strategy owns the module (wrapped for distribution), the collectives and checkpoint saving, and composes the
other plugins: it calls the Accelerator for device work, the Precision for numerics, the CheckpointIO for bytes and
the ClusterEnvironment for ranks. What it supports is declared as data that the validator reads.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NoReturn, TypeVar

import torch
from torch import nn

from xtrain.core._internal.apply import move_to_device
from xtrain.core._internal.state_dict import load_optimizer_state, optimizer_state
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.accelerator import Accelerator
    from xtrain.core.checkpoint_io import CheckpointIO, PathLike
    from xtrain.core.environment import ClusterEnvironment
    from xtrain.core.launcher import Launcher
    from xtrain.core.precision import Precision

__all__ = ["ReduceOp", "StepName", "Strategy"]

StepName = Literal["training_step", "validation_step", "test_step", "predict_step"]
ReduceOp = Literal["mean", "sum", "max", "min"]
_T = TypeVar("_T")


class Strategy(ABC):
    """Base class of every strategy.

    Attributes:
        name: The registry name.
        supported_accelerators: Accelerator names it runs on; ``None`` means any (that has a collective backend,
            when ``needs_dist_backend``).
        supported_precisions: Precision names it accepts; ``None`` means any.
        needs_dist_backend: Whether the accelerator must declare a ``torch.distributed`` backend.
        max_devices: The most devices per node it drives (``1`` for single-device strategies), ``None`` for any.
        checkpoint_layout: ``"full"`` (one file) or ``"sharded"`` (a directory, every rank writes); a strategy with
            both may set it per instance.
        handles_gradient_accumulation: Whether it accumulates gradients itself (Horovod), so loops must not: the fit
            loop then neither skips its synchronization nor divides the loss, and hands it the window through
            :meth:`set_gradient_accumulation`.
        resumes_exactly: Whether a run resumed from a mid-epoch checkpoint continues bitwise like the uninterrupted
            one (``False`` where ranks hold different model replicas or results depend on timing).
        supports_inference_mode: Whether evaluation may run under ``torch.inference_mode`` (``False`` where the
            strategy keeps tensors made during evaluation for training, as FSDP2's unsharded parameters: autograd
            refuses inference tensors); evaluation then uses ``torch.no_grad``.
        hang_timeout: Seconds without progress before a multi-process run counts as hung (``None``: never); set by
            the Trainer and the Engine through :meth:`set_hang_timeout`.
    """

    name: ClassVar[str]
    supported_accelerators: ClassVar[frozenset[str] | None] = None
    supported_precisions: ClassVar[frozenset[str] | None] = None
    needs_dist_backend: ClassVar[bool] = False
    max_devices: ClassVar[int | None] = None
    checkpoint_layout: Literal["full", "sharded"] = "full"
    handles_gradient_accumulation: ClassVar[bool] = False
    resumes_exactly: ClassVar[bool] = True
    supports_inference_mode: ClassVar[bool] = True
    hang_timeout: float | None = None

    def __init__(self, *, accelerator: Accelerator | None = None, precision: Precision | None = None,
                 checkpoint_io: CheckpointIO | None = None,
                 cluster_environment: ClusterEnvironment | None = None) -> None:
        self._accelerator = accelerator
        self._precision = precision
        self._checkpoint_io = checkpoint_io
        self._cluster_environment = cluster_environment
        self.parallel_devices: list[torch.device] = []
        self.num_nodes = 1
        self._module: nn.Module | None = None
        self._model: nn.Module | None = None

    # -- wiring, done once by the validator -------------------------------------------------------------------
    def connect(self, *, accelerator: Accelerator, precision: Precision, checkpoint_io: CheckpointIO,
                cluster_environment: ClusterEnvironment | None, devices: Sequence[torch.device],
                num_nodes: int) -> None:
        """Receive the resolved plugins and devices. Called by the validator before anything starts."""
        self._accelerator, self._precision, self._checkpoint_io = accelerator, precision, checkpoint_io
        self._cluster_environment = cluster_environment
        self.parallel_devices, self.num_nodes = list(devices), num_nodes

    @property
    def accelerator(self) -> Accelerator:
        value = self._accelerator
        return value if value is not None else _unconnected("accelerator")

    @property
    def precision(self) -> Precision:
        value = self._precision
        return value if value is not None else _unconnected("precision")

    @property
    def checkpoint_io(self) -> CheckpointIO:
        value = self._checkpoint_io
        return value if value is not None else _unconnected("checkpoint_io")

    @property
    def cluster_environment(self) -> ClusterEnvironment | None:
        return self._cluster_environment

    def check_config(self) -> None:
        """Raise :class:`ConfigError` for settings only this strategy can judge; runs before any process starts."""

    # -- ranks and devices --------------------------------------------------------------------------------------
    @property
    @abstractmethod
    def root_device(self) -> torch.device:
        """The device this process computes on."""

    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def node_rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    @property
    def processes_per_node(self) -> int:
        """How many processes this strategy runs on each node; cluster environments check ``devices=`` against it.

        One per device for process-per-device strategies (DDP, FSDP); one for strategies that drive every device
        of a node from a single process (single device, DataParallel, DDP2).
        """
        return 1

    @property
    def launcher(self) -> Launcher | None:
        """The launcher that starts the other processes, or ``None`` when they exist already or none are needed."""
        return None

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """``num_replicas`` and ``rank`` for sharding data, or ``None`` when every process sees all data."""
        return None

    @property
    def device_mesh(self) -> Any:
        """The named N-D ``DeviceMesh`` of strategies that build one (``model_parallel``), else ``None``.

        ``TrainModule.configure_model`` reads it as ``self.device_mesh`` to apply tensor parallelism and sharding.
        """
        return None

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def setup_environment(self) -> None:
        """Prepare this process (device, process group). Runs in every process after launching."""
        self.accelerator.setup_device(self.root_device)

    def setup(self, module: nn.Module) -> nn.Module:
        """Convert, move and wrap the module; returns the module to run forward passes through.

        Optimizers are created after this (from the wrapped module's parameters, which sharding may replace) and
        handed to :meth:`setup_optimizers`.
        """
        module = self.precision.convert_module(module).to(self.root_device)
        self._module = module
        self._model = self.wrap_module(module)
        return self._model

    def module_init_context(self) -> AbstractContextManager[Any]:
        """The context ``Trainer.init_module`` creates the user's module in: the precision's by default."""
        return self.precision.module_init_context()

    def setup_optimizers(self, optimizers: list[torch.optim.Optimizer]) -> list[torch.optim.Optimizer]:
        """Wrap or move the optimizers created for the set-up module (Horovod wraps them); default: unchanged."""
        return optimizers

    def set_gradient_accumulation(self, batches: int) -> None:
        """Receive the Trainer's ``accumulate_grad_batches`` at the start of every fit, before :meth:`setup_optimizers`.

        Only strategies that set :attr:`handles_gradient_accumulation` need it: the fit loop then neither skips their
        gradient synchronization nor divides the loss, so they must know the window themselves (Horovod hands it to
        its optimizer as ``backward_passes_per_step`` and averages the loss over it). The default ignores it.
        """

    def wrap_module(self, module: nn.Module) -> nn.Module:
        """Wrap the module for distribution (DDP, FSDP); the default returns it unchanged."""
        return module

    @property
    def module(self) -> nn.Module:
        """The user's module, unwrapped."""
        value = self._module
        return value if value is not None else _unconnected("module (call setup first)")

    @property
    def model(self) -> nn.Module:
        """The module as wrapped by :meth:`wrap_module`."""
        value = self._model
        return value if value is not None else _unconnected("model (call setup first)")

    def teardown(self) -> None:
        """Release everything set up; the strategy can be set up again afterwards."""
        self.precision.teardown()
        self.checkpoint_io.teardown()
        self.accelerator.teardown()

    def set_hang_timeout(self, timeout: float | None) -> None:
        """Receive the Trainer's or Engine's ``hang_timeout`` in seconds (``None``: off) before processes start.

        Multi-process strategies hand it to their watchdog, which reports and ends a run whose ranks stop making
        progress; one process has nobody to wait for and only keeps it.
        """
        self.hang_timeout = timeout

    def add_abort_handler(self, handler: Callable[[], None]) -> None:
        """Run ``handler`` (best effort) if this process is ended because another rank failed.

        Multi-process strategies end such a process at once (its main thread may be stuck in a collective), so code
        that must not lose data, e.g. loggers flushing their buffers, registers here. One process has nothing to do.
        """

    def on_exception(self, exception: BaseException) -> None:
        """Called when training raised, before the process exits (distributed strategies tell the other ranks)."""

    def before_fit_validation(self) -> None:
        """Called on every rank before each validation inside ``fit`` (the sanity check too), which every rank
        enters at the same point. The default does nothing; DDP makes rank 0's buffers (BatchNorm statistics)
        every rank's, as its forward does and as Lightning's validation through the DDP wrapper sees them."""

    # -- the step path ------------------------------------------------------------------------------------------
    def batch_to_device(self, batch: _T) -> _T:
        """Move a batch (tensors nested in lists, tuples, dicts, dataclasses) to :attr:`root_device`."""
        return move_to_device(batch, self.root_device)

    def run_step(self, name: StepName, *args: Any, **kwargs: Any) -> Any:
        """Call the module's ``training_step`` (or another step) in the precision's forward context."""
        with self.precision.forward_context():
            return getattr(self.module, name)(*args, **kwargs)

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Run the backward pass through the precision plugin. ``args``/``kwargs`` (``retain_graph=True``) are
        ``Tensor.backward``'s, from ``manual_backward(loss, *args, **kwargs)``; overrides pass them on."""
        self.precision.backward(loss, *args, **kwargs)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, *,
                       closure: Callable[[], Any] | None = None) -> bool:
        """Step ``optimizer``; returns ``False`` when the precision plugin skipped the step. ``closure`` only for
        optimizers that need one (see :meth:`Precision.optimizer_step`)."""
        if closure is not None:
            return self.precision.optimizer_step(optimizer, closure=closure)
        return self.precision.optimizer_step(optimizer)

    def no_backward_sync(self, enabled: bool = True, *, module: nn.Module | None = None) -> AbstractContextManager[Any]:
        """A context in which backward passes do not synchronize gradients (for gradient accumulation).

        Args:
            enabled: When ``False`` the context does nothing (the accumulation window's last step).
            module: The wrapped module whose synchronization to skip (default :attr:`model`); the Engine may have
                set up several.
        """
        return nullcontext()

    def join(self) -> int | None:
        """Where the ranks come together: called by the fit loop on every rank when this rank's training batches for
        the epoch are done (its data ran out, or training stopped), before the epoch-end hooks.

        Strategies that support uneven inputs (ranks with different numbers of batches) wait here, serving the
        gradient all-reduces of the ranks that still have batches, then give every rank the model and optimizer
        state of the rank that finished last and return that rank, so the loop adopts its progress (Horovod's
        ``hvd.join``). Strategies whose ranks train diverging replicas average them here, so validation,
        epoch-end checkpoints and the trained model are one model. The default does nothing and returns ``None``
        (nothing for the loop to adopt).
        """
        return None

    def clip_gradients(self, optimizer: torch.optim.Optimizer, *, value: float,
                       algorithm: Literal["norm", "value"] = "norm") -> torch.Tensor | None:
        """Clip the gradients of ``optimizer``'s parameters after unscaling them; returns the total norm for "norm"."""
        self.precision.unscale_gradients(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, value)
            return None
        return torch.nn.utils.clip_grad_norm_(params, value)

    # -- collectives (identity for one process) ---------------------------------------------------------------
    @abstractmethod
    def reduce(self, tensor: torch.Tensor, op: ReduceOp = "mean") -> torch.Tensor:
        """Reduce ``tensor`` over all ranks; every rank receives the result."""

    def reduce_data_parallel(self, tensor: torch.Tensor, op: ReduceOp = "mean") -> torch.Tensor:
        """Reduce ``tensor`` over the ranks that see different data: what a logged metric (``sync_dist``) needs.

        Every rank by default. A strategy whose ranks of one model replica share their batch (tensor parallelism)
        reduces over its data-parallel ranks only, so a summed count is not counted once per model shard.
        """
        return self.reduce(tensor, op)

    @abstractmethod
    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Gather ``tensor`` from all ranks, stacked along a new first dimension of size ``world_size``."""

    @abstractmethod
    def broadcast(self, obj: _T, src: int = 0) -> _T:
        """Send a picklable object from rank ``src`` to all ranks."""

    @abstractmethod
    def barrier(self, name: str | None = None) -> None:
        """Wait until every rank reaches this point."""

    def all_gather_object(self, obj: _T) -> list[_T]:
        """Gather a picklable object from every rank, in rank order."""
        return [obj]

    def reduce_boolean_decision(self, decision: bool, *, all: bool = True) -> bool:
        """Agree on a decision: ``all=True`` needs every rank to say yes, ``all=False`` any rank."""
        flag = torch.tensor(int(decision), device=self.root_device)
        total = int(self.reduce(flag, op="sum").item())
        return total == self.world_size if all else total > 0

    def start_boolean_decision(self, decision: bool, *, all: bool = True) -> Callable[[], bool]:
        """Start agreeing on a decision without waiting for it; calling the result waits and returns the answer.

        Lets a caller that asks the same question at every step overlap the collective with the next step's work
        (the preemption check reads at one save point the decision started at the previous one). The default
        decides at once.
        """
        agreed = self.reduce_boolean_decision(decision, all=all)
        return lambda: agreed

    # -- checkpoint content and IO ----------------------------------------------------------------------------
    # ``module`` names one of several set-up modules (the Engine's); the default is :attr:`module`.
    def module_state_dict(self, *, module: nn.Module | None = None) -> dict[str, Any]:
        """The module's state, keyed by parameter names (no wrapper prefixes)."""
        return (module if module is not None else self.module).state_dict()

    def load_module_state_dict(self, state: dict[str, Any], *, strict: bool = True,
                               module: nn.Module | None = None) -> None:
        (module if module is not None else self.module).load_state_dict(state, strict=strict)

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer, *,
                             module: nn.Module | None = None) -> dict[str, Any]:
        """The optimizer's state keyed by parameter names, so it loads under any strategy."""
        return optimizer_state(module if module is not None else self.module, optimizer)

    def load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, state: dict[str, Any], *,
                                  module: nn.Module | None = None) -> None:
        load_optimizer_state(module if module is not None else self.module, optimizer, state)

    def restore_problems(self, checkpoint: dict[str, Any], *, fitting: bool) -> list[str]:
        """What in ``checkpoint`` this strategy's layout cannot load, as lines for the error; ``[]`` if nothing.

        Called before anything is loaded (with the generic checks of keys, shapes, dtypes and parameter groups), so
        a restore is all or nothing. Strategies with needs of their own (FSDP needs optimizer state keyed by name)
        override it.
        """
        return []

    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike) -> None:
        """Write a full checkpoint from rank 0 through the CheckpointIO."""
        if self.is_global_zero:
            from xtrain.core.sharded_checkpoint import room_for_file  # checkpoint code: imported at the first save

            with room_for_file(path):
                self.checkpoint_io.save_checkpoint(checkpoint, path)

    def copy_checkpoint(self, source: PathLike, destination: PathLike) -> None:
        """Copy a checkpoint this strategy saved (rank 0; a sharded directory is copied with hard links)."""
        if not self.is_global_zero:
            return
        from xtrain.core.sharded_checkpoint import copy_sharded_checkpoint, is_sharded, room_for_file

        if is_sharded(source):
            self.checkpoint_io.settle()  # a file save to ``destination`` finishing later would land over the copy
            copy_sharded_checkpoint(source, destination)
        else:
            with room_for_file(destination):
                self.checkpoint_io.copy_checkpoint(source, destination)

    def load_checkpoint(self, path: PathLike, *, targets: dict[str, Any] | None = None) -> dict[str, Any]:
        """Read a checkpoint, a single file or a sharded directory written at any world size.

        Args:
            path: The checkpoint.
            targets: The live objects the checkpoint's entries are about to be loaded into, by key (a module, an
                optimizer, or a list of optimizers). Sharded strategies read their shards straight into them;
                others read every tensor whole and ignore it.
        """
        from xtrain.core.sharded_checkpoint import is_sharded, read_sharded_checkpoint

        if is_sharded(path):
            self.checkpoint_io.wait()
            return read_sharded_checkpoint(path, verify=self.checkpoint_io.checksums)
        return self.checkpoint_io.load_checkpoint(path)

    def remove_checkpoint(self, path: PathLike) -> None:
        if self.is_global_zero:
            from xtrain.core.sharded_checkpoint import is_sharded, remove_checkpoint_path

            if is_sharded(path):
                self.checkpoint_io.settle()  # queued file work on this path runs first, as it was asked first
                remove_checkpoint_path(path)
            else:
                self.checkpoint_io.remove_checkpoint(path)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _unconnected(what: str) -> NoReturn:
    """The error for a plugin read before the strategy has it (the properties check inline: they run every step)."""
    raise ConfigError("strategy", None, f"has no {what} yet.",
                      fix="let Trainer(...) or Engine(...) resolve the strategy, or call strategy.connect(...).")
