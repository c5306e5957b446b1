"""``strategy="allreduce"``: data parallel without DDP, one flattened gradient all-reduce per optimizer step.

Every rank holds a full replica. Rank 0's initial weights are broadcast when the module is set up, so the
replicas start equal; after the last backward pass of each accumulation window the gradients are averaged, so
they stay equal.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, ClassVar, Literal

import torch
import torch.distributed as dist
from torch import nn
from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.core.launcher import Launcher
from xtrain.core.parallel import ParallelStrategy
from xtrain.strategies.launchers import launcher_for

StartMethod = Literal["popen", "spawn", "fork"]


class AllReduceStrategy(ParallelStrategy):
    """Data parallel with a hand-written gradient all-reduce (one flattened bucket per step).

    Args:
        start_method: How the other ranks start: ``"popen"`` re-runs the command, ``"spawn"`` or ``"fork"``.
            Ignored when a cluster (torchrun, SLURM) started them.
        **kwargs: ``process_group_backend``, ``timeout``, ``heartbeat_timeout`` and plugins, as for
            :class:`~xtrain.core.parallel.ParallelStrategy`.
    """

    name: ClassVar[str] = "allreduce"
    max_devices: ClassVar[int | None] = None  # one process per device, as many as the node has

    def __init__(self, *, start_method: StartMethod = "popen", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_method = start_method
        self._launcher: Launcher | None = None
        self._sync = True

    @override
    def check_config(self) -> None:
        if self.start_method not in ("popen", "spawn", "fork"):
            raise ConfigError("start_method", self.start_method, "is not a start method.",
                              choices=["popen", "spawn", "fork"], fix="write start_method='popen'.")

    @property
    @override
    def launcher(self) -> Launcher | None:
        if self._launcher is None and not self.environment.creates_processes_externally:
            # num_nodes comes from Trainer(num_nodes=...) through connect(); every node starts its own processes.
            self._launcher = launcher_for(self.start_method, num_processes=len(self.parallel_devices),
                                          num_nodes=self.num_nodes, environment=self.environment)
        return self._launcher

    @override
    def setup(self, module: nn.Module) -> nn.Module:
        model = super().setup(module)  # precision conversion, move to root_device, wrap_module (unchanged here)
        if self.world_size > 1:
            with torch.no_grad():
                for tensor in self.module.state_dict().values():
                    dist.broadcast(tensor, src=0)  # every replica starts from rank 0's weights and buffers
        return model

    @override
    def backward(self, loss: torch.Tensor) -> None:
        super().backward(loss)
        if self._sync and self.world_size > 1:
            self._average_gradients()

    @override
    def no_backward_sync(self, enabled: bool = True, *, module: nn.Module | None = None) -> AbstractContextManager[Any]:
        return self._local_gradients() if enabled else nullcontext()

    @contextmanager
    def _local_gradients(self) -> Iterator[None]:
        self._sync = False
        try:
            yield
        finally:
            self._sync = True

    def _average_gradients(self) -> None:
        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= self.world_size
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def __repr__(self) -> str:
        return f"AllReduceStrategy(start_method={self.start_method!r})"
