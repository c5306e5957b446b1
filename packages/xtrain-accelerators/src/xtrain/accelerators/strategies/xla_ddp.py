"""``xla``: data parallel with one process per XLA device (TPU chips), collectives over XLA.

torch_xla starts the workers (``xmp.spawn``, see :class:`~xtrain.accelerators.strategies.xla_launcher.XLALauncher`)
and gives each its rank and device. Gradients are all-reduced after every backward pass that is not inside
``no_backward_sync`` (gradient accumulation), so clipping and the optimizer see the averaged gradients, as under DDP.
Collectives use ``torch_xla.core.xla_model``; no ``torch.distributed`` process group is created.

On XLA's CPU client several replicas run as threads of one process and any collective between them aborts the
process after a rendezvous timeout (pytorch/xla#9089), so more than one device there is refused before anything
starts, pointing to ``xla_spmd``. One device works everywhere, which is how this strategy is tested off TPUs.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn
from typing_extensions import override

from xtrain.accelerators._internal.xla_runtime import import_xla, on_cpu, sync
from xtrain.accelerators.strategies.single_xla import SingleXLAStrategy
from xtrain.accelerators.strategies.xla_launcher import XLALauncher
from xtrain.accelerators.xla import XLAAccelerator
from xtrain.core.checkpoint_io import PathLike
from xtrain.core.errors import ConfigError
from xtrain.core.launcher import Launcher
from xtrain.core.strategy import ReduceOp

__all__ = ["XLAStrategy"]

_T = TypeVar("_T")


class XLAStrategy(SingleXLAStrategy):
    """One process per XLA device, gradients all-reduced over XLA (TPU pods and hosts).

    Args:
        sync_module_states: Broadcast rank 0's parameters to every worker at setup, so replicas start equal even
            when the model was initialized with different seeds.
        **kwargs: Plugins, as for :class:`~xtrain.core.strategy.Strategy`.
    """

    name: ClassVar[str] = "xla"
    needs_dist_backend: ClassVar[bool] = True
    max_devices: ClassVar[int | None] = None

    def __init__(self, *, sync_module_states: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sync_module_states = sync_module_states
        self._launched = False
        self._sync_gradients = True
        self._launcher: XLALauncher | None = None

    # -- ranks, devices, launching -----------------------------------------------------------------------------
    @property
    @override
    def launcher(self) -> Launcher | None:
        if self._launcher is None:
            count = self.accelerator.device_count()
            self._launcher = XLALauncher(nprocs=1 if len(self.parallel_devices) == 1 and count > 1 else None)
        return self._launcher

    @property
    @override
    def root_device(self) -> torch.device:
        if self._launched and isinstance(self.accelerator, XLAAccelerator):
            return self.accelerator.local_device()
        return self.parallel_devices[0] if self.parallel_devices else torch.device("xla", 0)

    def _runtime(self) -> Any:
        return import_xla("torch_xla.runtime")

    @property
    @override
    def global_rank(self) -> int:
        return int(self._runtime().global_ordinal()) if self._launched else 0

    @property
    @override
    def local_rank(self) -> int:
        return int(self._runtime().local_ordinal()) if self._launched else 0

    @property
    @override
    def world_size(self) -> int:
        if self._launched:
            return int(self._runtime().world_size())
        return len(self.parallel_devices) * self.num_nodes

    @property
    @override
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    @override
    def check_config(self) -> None:
        count, wanted = self.accelerator.device_count(), len(self.parallel_devices)
        if wanted not in (1, count):
            raise ConfigError("devices", wanted, f"torch_xla starts one process per device on all {count} devices of "
                              "a host, or runs one device in this process; it cannot start a subset.",
                              fix=f"write devices=1 or devices=-1 (all {count}).")
        if on_cpu() and wanted * self.num_nodes > 1:
            raise ConfigError("strategy", self.name, "runs replicas that communicate, and on XLA's CPU client "
                              "(PJRT_DEVICE=CPU) every cross-replica collective aborts the process (pytorch/xla#9089).",
                              fix="use strategy='xla_spmd' for several XLA CPU devices, or devices=1.")

    @override
    def setup_environment(self) -> None:
        self._launched = True
        super().setup_environment()

    @override
    def setup(self, module: nn.Module) -> nn.Module:
        model = super().setup(module)
        if self.sync_module_states and self.world_size > 1:
            import_xla("torch_xla.core.xla_model").broadcast_master_param(model)
        return model

    # -- gradients -----------------------------------------------------------------------------------------------
    @override
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        super().backward(loss, *args, **kwargs)
        if self._sync_gradients and self.world_size > 1:
            grads = [p.grad for p in self.module.parameters() if p.grad is not None]
            if grads:
                xm = import_xla("torch_xla.core.xla_model")
                xm.all_reduce(xm.REDUCE_SUM, grads, scale=1.0 / self.world_size)

    @override
    def no_backward_sync(self, enabled: bool = True, *, module: nn.Module | None = None) -> AbstractContextManager[Any]:
        return self._no_sync(enabled)

    @contextmanager
    def _no_sync(self, enabled: bool) -> Iterator[None]:
        previous, self._sync_gradients = self._sync_gradients, not enabled
        try:
            yield
        finally:
            self._sync_gradients = previous

    # -- collectives ---------------------------------------------------------------------------------------------
    @override
    def reduce(self, tensor: torch.Tensor, op: ReduceOp = "mean") -> torch.Tensor:
        xm = import_xla("torch_xla.core.xla_model")
        kinds = {"sum": xm.REDUCE_SUM, "mean": xm.REDUCE_SUM, "max": xm.REDUCE_MAX, "min": xm.REDUCE_MIN}
        if op not in kinds:
            raise ConfigError("op", op, "is not a reduction.", choices=list(kinds), fix="pass op='mean'.")
        value = tensor.detach().to(self.root_device)
        if op == "mean" and not value.is_floating_point():
            value = value.float()
        result: torch.Tensor = xm.all_reduce(kinds[op], value)
        return result / self.world_size if op == "mean" else result

    @override
    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        xm = import_xla("torch_xla.core.xla_model")
        gathered: torch.Tensor = xm.all_gather(tensor.detach().to(self.root_device).unsqueeze(0), dim=0)
        return gathered

    @override
    def broadcast(self, obj: _T, src: int = 0) -> _T:
        if self.world_size == 1:
            return obj
        xm = import_xla("torch_xla.core.xla_model")
        data = pickle.dumps(obj) if self.global_rank == src else b""
        size = torch.tensor([len(data)], dtype=torch.int64, device=self.root_device)
        xm.collective_broadcast([size], root_ordinal=src)
        buffer = torch.zeros(int(size.item()), dtype=torch.uint8, device=self.root_device)
        if self.global_rank == src:
            buffer.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.root_device))
        xm.collective_broadcast([buffer], root_ordinal=src)
        return pickle.loads(buffer.cpu().numpy().tobytes())  # type: ignore[no-any-return]

    @override
    def all_gather_object(self, obj: _T) -> list[_T]:
        if self.world_size == 1:
            return [obj]
        data = pickle.dumps(obj)
        sizes = self.all_gather(torch.tensor([len(data)], dtype=torch.int64)).cpu().view(-1).tolist()
        padded = torch.zeros(max(sizes), dtype=torch.uint8)
        padded[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        rows = self.all_gather(padded).cpu()
        return [pickle.loads(rows[i, : sizes[i]].numpy().tobytes()) for i in range(len(sizes))]

    @override
    def barrier(self, name: str | None = None) -> None:
        if self._launched and self.world_size > 1:
            import_xla("torch_xla.core.xla_model").rendezvous(name or "barrier")

    @override
    def reduce_boolean_decision(self, decision: bool, *, all: bool = True) -> bool:
        total = int(self.reduce(torch.tensor(int(decision)), op="sum").item())
        return total == self.world_size if all else total > 0

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike) -> None:
        sync()  # every rank runs its pending graph (it may hold collectives) before rank 0 reads tensors
        super().save_checkpoint(checkpoint, path)
