"""Training on one device in one process."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import torch
from typing_extensions import override

from xtrain.core.strategy import ReduceOp, StepName, Strategy

__all__ = ["SingleDeviceStrategy"]

_T = TypeVar("_T")


class SingleDeviceStrategy(Strategy):
    """One process, one device: the device comes from the accelerator (never assumed to be the CPU)."""

    name: ClassVar[str] = "single_device"
    max_devices: ClassVar[int | None] = 1

    @property
    @override
    def root_device(self) -> torch.device:
        if not self.parallel_devices:
            return torch.device("cpu")
        return self.parallel_devices[0]

    @override
    def run_step(self, name: StepName, *args: Any, **kwargs: Any) -> Any:
        if not self.precision.has_forward_context:
            return getattr(self.module, name)(*args, **kwargs)
        return super().run_step(name, *args, **kwargs)

    @override
    def reduce(self, tensor: torch.Tensor, op: ReduceOp = "mean") -> torch.Tensor:
        return tensor

    @override
    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.unsqueeze(0)

    @override
    def broadcast(self, obj: _T, src: int = 0) -> _T:
        return obj

    @override
    def barrier(self, name: str | None = None) -> None:
        return None

    @override
    def reduce_boolean_decision(self, decision: bool, *, all: bool = True) -> bool:
        return decision
