"""Horovod: gradients averaged by ``hvd.DistributedOptimizer``, collectives through ``horovod.torch``.

Ranks start three ways, all detected: ``horovodrun -np N --gloo python script.py`` (the ``horovod`` environment),
``mpirun -np N python script.py`` with an MPI build (the ``mpi`` environment), or plain ``python script.py`` with
``devices=N``, where :class:`~xtrain.strategies.launchers.HorovodLauncher` runs Horovod's Gloo rendezvous itself.

* At setup, rank 0's parameters and buffers, then its optimizer state, are broadcast to every rank.
* Each optimizer is wrapped in ``hvd.DistributedOptimizer``; its step averages the gradients (optionally
  compressed to float16 on the wire). Gradient accumulation is Horovod's own ``backward_passes_per_step``, so this
  strategy ``handles_gradient_accumulation``: it averages the loss over the window, as the fit loop does for DDP.
* Uneven inputs: at the end of every epoch each rank calls ``hvd.join()``, which serves the gradient all-reduces
  of the ranks that still have batches (a joined rank contributes zeros) until all have joined; then the ranks
  continue from the one that trained longest. Between the first and the last rank running out, only all-reduces
  work (gradients, ``sync_dist`` logging), so mid-epoch validation or checkpoints in that window are not supported.
* Fail-fast works as for DDP: Horovod has no key-value store, so rank 0 hosts a ``TCPStore`` for the watchdog and
  announces its address through a Horovod broadcast.
* Every collective is named from a counter all ranks advance alike, since Horovod matches operations by name, and
  marked on the progress signal like DDP's, so a hang report says which collective each rank last entered.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, ClassVar, Literal, TypeVar

import torch
from torch import nn
from typing_extensions import override

from xtrain.core._internal.progress_signal import PROGRESS
from xtrain.core.errors import ConfigError
from xtrain.core.launcher import Launcher
from xtrain.core.parallel import ParallelStrategy
from xtrain.core.strategy import ReduceOp
from xtrain.strategies._internal.caller_failure import report_caller_failure
from xtrain.strategies._internal.horovod_optimizer import HorovodOptimizers
from xtrain.strategies._internal.horovod_runtime import horovod_or_error, horovod_store
from xtrain.strategies._internal.horovod_wire import SUM_DTYPE, bitwise, broadcast_tensors
from xtrain.strategies.launchers import HorovodLauncher

__all__ = ["Compression", "HorovodStrategy"]

Compression = Literal["none", "fp16"]
_T = TypeVar("_T")


class HorovodStrategy(ParallelStrategy):
    """Data-parallel training with Horovod.

    Args:
        compression: ``"fp16"`` sends gradients as float16 (half the bytes), ``"none"`` as they are.
        backward_passes_per_step: Backward passes per optimizer step; default: the Trainer's
            ``accumulate_grad_batches`` (set it when you drive the optimizer yourself, e.g. with the Engine).
        gradient_predivide_factor: Divide gradients by this before the sum and by ``world_size / factor`` after
            (trades overflow against underflow with float16).
        groups: Number of groups the gradient all-reduces are fused into (Horovod's ``groups``); ``None``: by time.
        sparse_as_dense: All-reduce sparse gradients as dense tensors.
        **kwargs: ``heartbeat_timeout``, ``timeout`` and plugins, as for :class:`~xtrain.core.parallel.ParallelStrategy`.
    """

    name: ClassVar[str] = "horovod"
    handles_gradient_accumulation: ClassVar[bool] = True

    def __init__(self, *, compression: Compression = "none", backward_passes_per_step: int | None = None,
                 gradient_predivide_factor: float = 1.0, groups: int | None = None, sparse_as_dense: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if compression not in ("none", "fp16"):
            raise ConfigError("compression", compression, "is not a Horovod compression.", choices=["none", "fp16"],
                              fix="write compression='fp16' to halve the gradient traffic, or leave it 'none'.")
        if backward_passes_per_step is not None and backward_passes_per_step < 1:
            raise ConfigError("backward_passes_per_step", backward_passes_per_step, "must be at least 1.",
                              fix="leave it None to follow accumulate_grad_batches.")
        self.compression: Compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.gradient_predivide_factor = gradient_predivide_factor
        self.groups = groups
        self.sparse_as_dense = sparse_as_dense
        self._launcher: Launcher | None = None
        self._optimizers = HorovodOptimizers(self)
        self._accumulate = 1
        self._sequence = 0
        self._joins = 0
        self._store: Any = None
        self._pending: dict[Any, int | None] = {}

    @property
    def hvd(self) -> Any:
        """The ``horovod.torch`` module (imported on first use)."""
        return horovod_or_error()

    # -- launching and checks ---------------------------------------------------------------------------------------
    @property
    @override
    def launcher(self) -> Launcher | None:
        if self._launcher is None and self._cluster_environment is not None and \
                not self.environment.creates_processes_externally:
            self._launcher = HorovodLauncher(num_processes=len(self.parallel_devices), num_nodes=self.num_nodes,
                                             environment=self.environment)
        return self._launcher

    @override
    def check_config(self) -> None:
        hvd = self.hvd
        if self.accelerator.name != "cpu" and not hvd.cuda_built():
            raise ConfigError("accelerator", self.accelerator.name, "needs a Horovod built with GPU operations, and "
                              "this one has CPU (Gloo) operations only.",
                              fix="rebuild it: python tools/build_horovod.py --gpu on --force")
        external = self.environment.creates_processes_externally
        gloo_launch = "HOROVOD_GLOO_RENDEZVOUS_ADDR" in os.environ
        if external and self.environment.world_size() > 1 and not gloo_launch and not hvd.mpi_built():
            raise ConfigError("strategy", "horovod", "runs under mpirun, but this Horovod was built without MPI, so "
                              "its ranks cannot find each other.",
                              fix="start with horovodrun -np N --gloo, or plain python with devices=N, or rebuild "
                                  "with MPI: apt-get install libopenmpi-dev && python tools/build_horovod.py --mpi on "
                                  "--force")

    # -- process setup ----------------------------------------------------------------------------------------------
    @override
    def setup_environment(self) -> None:
        hvd = self.hvd
        self.set_world_ranks()
        self.accelerator.setup_device(self.root_device)
        if not hvd.is_initialized():
            hvd.init()
        if (hvd.size(), hvd.rank()) != (self.world_size, self.global_rank):
            alone = " (Horovod found no rendezvous and assumed one process)" if hvd.size() == 1 else ""
            raise ConfigError("plugins", type(self.environment).__name__, f"says rank {self.global_rank} of "
                              f"{self.world_size}, but Horovod says rank {hvd.rank()} of {hvd.size()}{alone}.",
                              fix="let xtrain detect the launcher (do not pass a cluster environment), and start the "
                                  "job with plain python, horovodrun --gloo, or mpirun with an MPI build of Horovod.")
        self.start_watchdog()

    @override
    def watchdog_store(self) -> Any:
        if self._store is None:
            self._store = horovod_store(self.hvd, name="xtrain.watchdog.store", timeout=self.timeout)
        import torch.distributed as dist

        return dist.PrefixStore(f"xtrain/watchdog/{self._next_name('run')}/", self._store)  # type: ignore[attr-defined]

    @override
    def setup(self, module: nn.Module) -> nn.Module:
        model = super().setup(module)
        if self.world_size > 1:
            with PROGRESS.collective("broadcast_parameters (rank 0's weights)"):
                broadcast_tensors(self.hvd, self.module.state_dict().items(), root_rank=0)
        return model

    @override
    def setup_optimizers(self, optimizers: list[torch.optim.Optimizer]) -> list[torch.optim.Optimizer]:
        return self._optimizers.wrap(optimizers)

    @override
    def set_gradient_accumulation(self, batches: int) -> None:
        self._accumulate = batches
        self._optimizers.set_passes(self.passes_per_step)

    @property
    def passes_per_step(self) -> int:
        """Backward passes Horovod waits for before it all-reduces a gradient."""
        return self.backward_passes_per_step or self._accumulate

    @override
    def on_exception(self, exception: BaseException) -> None:
        report_caller_failure(self._launcher, exception)
        super().on_exception(exception)

    # -- the step path ----------------------------------------------------------------------------------------------
    @override
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        # The fit loop leaves the loss of an accumulation window unscaled for strategies that accumulate themselves.
        self.precision.backward(loss / self._accumulate if self._accumulate > 1 else loss, *args, **kwargs)

    @override
    def clip_gradients(self, optimizer: torch.optim.Optimizer, *, value: float,
                       algorithm: Literal["norm", "value"] = "norm") -> torch.Tensor | None:
        self._optimizers.synchronize(optimizer)  # clip the averaged gradients, as every rank then steps with them
        return super().clip_gradients(optimizer, value=value, algorithm=algorithm)

    @override
    def optimizer_step(self, optimizer: torch.optim.Optimizer, *,
                       closure: Callable[[], Any] | None = None) -> bool:
        if closure is not None:
            # The gradients are averaged once before the step; an optimizer re-evaluating the loss inside its step
            # would use this rank's own gradients and the replicas would diverge.
            raise ConfigError("optimizer", type(optimizer).__name__, "needs a closure, which the horovod strategy "
                              "cannot synchronize.", choices=["ddp", "fsdp"],
                              fix="use strategy='ddp' for closure optimizers such as LBFGS.")
        return self._optimizers.step(optimizer, self.precision.optimizer_step)

    @override
    def join(self) -> int | None:
        if self.world_size == 1:
            return None
        hvd = self.hvd
        self._finish_pending()
        with PROGRESS.collective("join (uneven inputs: serving the ranks still training)", checked=False):
            last = int(hvd.join(self.root_device.index if self.root_device.type == "cuda" else -1))
        self._joins += 1
        mine = torch.tensor([[self._optimizers.steps, self._sequence]], dtype=torch.int64)
        with PROGRESS.collective("allgather (step counts after join)", mine):
            counts = hvd.allgather(mine, name=f"xtrain.join.{self._joins}")
        self._sequence = int(counts[:, 1].max()) + 1  # ranks that trained longer named more collectives
        if int(counts[:, 0].min()) == int(counts[:, 0].max()):
            return None
        with PROGRESS.collective(f"broadcast_parameters (rank {last}'s weights after join)"):
            broadcast_tensors(hvd, self.module.state_dict().items(), root_rank=last)
        self._optimizers.adopt(root_rank=last, steps=int(counts[last, 0]))
        return last

    # -- collectives ------------------------------------------------------------------------------------------------
    def _next_name(self, kind: str) -> str:
        self._sequence += 1
        return f"xtrain.{kind}.{self._sequence}"

    def _ops(self) -> dict[str, Any]:
        hvd = self.hvd
        return {"sum": hvd.Sum, "mean": hvd.Average, "max": hvd.Max, "min": hvd.Min}

    @override
    def reduce(self, tensor: torch.Tensor, op: ReduceOp = "mean") -> torch.Tensor:
        ops = self._ops()
        if op not in ops:
            raise ConfigError("op", op, "is not a reduction.", choices=list(ops), fix="pass op='mean'.")
        value = self._on_device(tensor)
        if self.world_size == 1:
            return value.float() if op == "mean" and not value.is_floating_point() else value
        dtype = value.dtype
        if op == "mean" and not value.is_floating_point():
            value, dtype = value.float(), torch.float32
        wire = SUM_DTYPE.get(dtype, dtype)
        value = value.to(wire)
        with PROGRESS.collective("allreduce", value):
            result = self.hvd.allreduce(value, op=ops[op], name=self._next_name("reduce"))
        return result.to(dtype)  # type: ignore[no-any-return]

    @override
    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        local = self._on_device(tensor).contiguous().unsqueeze(0)
        if self.world_size == 1:
            return local
        with PROGRESS.collective("allgather", local):
            gathered: torch.Tensor = self.hvd.allgather(bitwise(local), name=self._next_name("all_gather"))
        return gathered.view(local.dtype)  # gathered as its bits: no arithmetic, so exact

    @override
    def broadcast(self, obj: _T, src: int = 0) -> _T:
        if self.world_size == 1:
            return obj
        with PROGRESS.collective(f"broadcast_object(src={src})"):
            return self.hvd.broadcast_object(obj, root_rank=src, name=self._next_name("broadcast"))  # type: ignore[no-any-return]

    @override
    def all_gather_object(self, obj: _T) -> list[_T]:
        if self.world_size == 1:
            return [obj]
        with PROGRESS.collective("allgather_object"):
            return list(self.hvd.allgather_object(obj, name=self._next_name("all_gather_object")))

    @override
    def barrier(self, name: str | None = None) -> None:
        if self.world_size > 1 and self.hvd.is_initialized():
            with PROGRESS.collective(f"barrier({name!r})" if name else "barrier"):
                self.hvd.barrier()

    @override
    def start_boolean_decision(self, decision: bool, *, all: bool = True) -> Callable[[], bool]:
        if self.world_size == 1:
            return lambda: decision
        hvd = self.hvd
        flag = torch.tensor([int(decision)], dtype=torch.int32)
        with PROGRESS.collective("allreduce (a decision every rank takes together)", flag):
            handle = hvd.allreduce_async(flag, op=hvd.Sum, name=self._next_name("decision"))
        self._pending[handle] = None

        def result() -> bool:
            total = self._finish(handle)
            return total == self.world_size if all else total > 0

        return result

    def _finish(self, handle: Any) -> int:
        """Wait for a pending decision; ``hvd.join`` loses handles still pending, so join finishes them first."""
        total = self._pending.pop(handle, None)
        if total is not None:
            return total
        with PROGRESS.collective("allreduce (a decision every rank takes together)", checked=False):
            return int(self.hvd.synchronize(handle).item())

    def _finish_pending(self) -> None:
        for handle in list(self._pending):
            with PROGRESS.collective("allreduce (a decision every rank takes together)", checked=False):
                self._pending[handle] = int(self.hvd.synchronize(handle).item())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(compression={self.compression!r})"
