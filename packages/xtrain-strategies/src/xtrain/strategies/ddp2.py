"""DDP2: one process per node running DataParallel over the node's GPUs, gradients all-reduced across nodes.

Each node's process sees its shard of the data (the sampler shards by node), splits every batch over its GPUs
with DataParallel, and after the backward pass averages the gradients with the other nodes in one flattened
all-reduce per dtype. Initial weights are broadcast from node 0 so every node starts alike.

On the CPU a node has one device, so ``ddp2`` with ``accelerator="cpu"`` takes ``devices=1`` and runs one process
per node, gradients all-reduced across nodes: ``num_nodes=2, devices=1`` is two real processes (start one per
node, with ``NODE_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``, as for any multi-node run). More CPU devices is a
:class:`~xtrain.core.errors.ConfigError` pointing to ``ddp``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn
from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.core.parallel import ParallelStrategy
from xtrain.core.strategy import StepName
from xtrain.strategies._internal.gradients import all_reduce_gradients
from xtrain.strategies.dp import run_split_step, wrap_data_parallel

__all__ = ["DDP2Strategy"]


class DDP2Strategy(ParallelStrategy):
    """DataParallel inside each node, gradient all-reduce across nodes (one process per node)."""

    name: ClassVar[str] = "ddp2"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._sync = True

    @override
    def check_config(self) -> None:
        if self.accelerator.device_type == "cpu" and len(self.parallel_devices) > 1:
            raise ConfigError("devices", len(self.parallel_devices), "strategy='ddp2' runs DataParallel over the "
                              "GPUs of each node; on the CPU a node has one device to drive.",
                              fix="write devices=1 (one CPU process per node), or use strategy='ddp' to train "
                                  "several CPU processes per node.")

    @property
    @override
    def processes_per_node(self) -> int:
        return 1

    @override
    def set_world_ranks(self) -> None:
        env = self.environment
        env.set_world_size(self.num_nodes)
        env.set_global_rank(env.node_rank())

    @property
    @override
    def root_device(self) -> torch.device:
        return self.parallel_devices[0]

    @override
    def setup(self, module: nn.Module) -> nn.Module:
        model = super().setup(module)
        if self.world_size > 1:
            with torch.no_grad():
                for tensor in [*module.parameters(), *module.buffers()]:
                    dist.broadcast(tensor.data, src=0)
        return model

    @override
    def wrap_module(self, module: nn.Module) -> nn.Module:
        return wrap_data_parallel(module, self.parallel_devices)

    @override
    def run_step(self, name: StepName, *args: Any, **kwargs: Any) -> Any:
        return run_split_step(self, name, *args, **kwargs)

    @override
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        super().backward(loss, *args, **kwargs)
        if self._sync and self.world_size > 1:
            self._all_reduce_gradients()

    @override
    def no_backward_sync(self, enabled: bool = True, *, module: nn.Module | None = None) -> AbstractContextManager[Any]:
        return self._no_sync() if enabled else _nothing()

    @contextmanager
    def _no_sync(self) -> Iterator[None]:
        self._sync = False
        try:
            yield
        finally:
            self._sync = True

    def _all_reduce_gradients(self) -> None:
        all_reduce_gradients(self.module.parameters(), self.world_size)


@contextmanager
def _nothing() -> Iterator[None]:
    yield
