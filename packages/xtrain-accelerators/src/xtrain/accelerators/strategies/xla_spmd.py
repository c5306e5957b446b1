"""``xla_spmd``: one process drives every XLA device of the host; the batch is sharded over them (data parallel).

With SPMD, torch_xla presents all devices as one virtual device (``xla:0``). The module's parameters stay replicated
(the default for unannotated tensors), each batch tensor is annotated as sharded along its first dimension over a
one-axis mesh, and XLA's partitioner inserts the gradient all-reduce itself. There is one process, so there is no
launcher and the strategy's collectives are the identity, as for a single device. Unlike the multi-process ``xla``
strategy this works on XLA's CPU client too (``PJRT_DEVICE=CPU CPU_NUM_DEVICES=2``), which is how it is tested.

The dataloader's batch is the *global* batch: ``batch_size=64`` on 4 devices puts 16 samples on each (DDP would put
64 on each). An uneven batch (the last one of an epoch) is padded by XLA, so every batch size works.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import torch
from typing_extensions import override

from xtrain.accelerators._internal.xla_runtime import import_xla, sync
from xtrain.accelerators.strategies.single_xla import SingleXLAStrategy
from xtrain.core.errors import ConfigError
from xtrain.core.strategy import Strategy

__all__ = ["XLASPMDStrategy"]

_T = TypeVar("_T")


class XLASPMDStrategy(SingleXLAStrategy):
    """Data parallel over all XLA devices of this host through GSPMD sharding, in one process.

    Args:
        axis_name: The name of the mesh axis the batch is sharded along (for users who annotate their own tensors
            with ``strategy.mesh``).
        **kwargs: Plugins, as for :class:`~xtrain.core.strategy.Strategy`.
    """

    name: ClassVar[str] = "xla_spmd"
    max_devices: ClassVar[int | None] = None

    def __init__(self, *, axis_name: str = "data", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.axis_name = axis_name
        self._mesh: Any = None

    @property
    @override
    def root_device(self) -> torch.device:
        """The virtual device that stands for all devices under SPMD: ``xla:0``."""
        return torch.device("xla", 0)

    @property
    def mesh(self) -> Any:
        """The ``torch_xla.distributed.spmd.Mesh`` over every device (one axis, :attr:`axis_name`)."""
        if self._mesh is None:
            raise ConfigError("strategy", self.name, "has no mesh before setup_environment().",
                              fix="let Trainer(...) set the strategy up before asking for its mesh.")
        return self._mesh

    @override
    def check_config(self) -> None:
        """SPMD shards over every device of the host, on one host: refuse a subset or several nodes up front."""
        if self.num_nodes != 1:
            raise ConfigError("num_nodes", self.num_nodes, "xla_spmd runs in one process on one host here.",
                              fix="write num_nodes=1, or use strategy='xla' (one process per device) across hosts.")
        count = self.accelerator.device_count()
        wanted = [torch.device("xla", i) for i in range(count)]
        if self.parallel_devices != wanted:
            raise ConfigError("devices", [d.index for d in self.parallel_devices],
                              f"xla_spmd shards the batch over every XLA device of this host ({count}), not a subset.",
                              fix=f"write devices=-1 (all {count}); to use fewer, limit the devices torch_xla sees "
                                  "(CPU_NUM_DEVICES, TPU_VISIBLE_CHIPS).")

    @override
    def setup_environment(self) -> None:
        """Turn SPMD on before the first XLA tensor exists, then build the mesh over all devices."""
        xr = import_xla("torch_xla.runtime")
        xs = import_xla("torch_xla.distributed.spmd")
        xr.use_spmd()
        super().setup_environment()
        count = int(xr.global_runtime_device_count())
        self._mesh = xs.Mesh(list(range(count)), (count,), (self.axis_name,))

    @override
    def batch_to_device(self, batch: _T) -> _T:
        sync()
        moved = Strategy.batch_to_device(self, batch)
        self._shard(moved)
        return moved

    def _shard(self, data: Any) -> None:
        """Annotate every tensor of the batch with at least one dimension as sharded along its first dimension."""
        if isinstance(data, torch.Tensor):
            if data.dim() >= 1:
                xs = import_xla("torch_xla.distributed.spmd")
                xs.mark_sharding(data, self.mesh, (self.axis_name,) + (None,) * (data.dim() - 1))
        elif isinstance(data, dict):
            for value in data.values():
                self._shard(value)
        elif isinstance(data, (list, tuple)):
            for value in data:
                self._shard(value)
