"""DataParallel: one process drives several GPUs, splitting each batch across them.

Each step, ``torch.nn.DataParallel`` copies the module to every device, runs ``training_step`` on each slice of the
batch in parallel threads and gathers the outputs on the first device: a loss comes back as one value per device.
``TrainModule.training_step_end`` receives those gathered outputs to combine them (for example to compute a metric
over the full batch); whatever it returns, a loss with one entry per device is then averaged.

``self.log`` inside ``training_step`` records the first device's replica only (replicas run in threads; logging
from all of them would race); log full-batch values in ``training_step_end``.

On the CPU there is a single device to drive, so ``dp`` with ``accelerator="cpu"`` accepts ``devices=1`` only and
then runs like ``single_device`` while calling the same hooks (useful to debug DP code on a laptop); more devices
is a :class:`~xtrain.core.errors.ConfigError` pointing to ``ddp``.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import torch
from torch import nn
from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.core.strategy import ReduceOp, StepName, Strategy
from xtrain.strategies._internal.redirect import StepRedirect, call_step

__all__ = ["DataParallelStrategy", "mean_loss"]

_T = TypeVar("_T")


def mean_loss(output: Any) -> Any:
    """Average a per-device loss (a 1-d tensor, alone or under ``"loss"``) into the scalar the loop backpropagates."""
    if isinstance(output, torch.Tensor) and output.ndim > 0:
        return output.mean()
    if isinstance(output, dict) and isinstance(output.get("loss"), torch.Tensor) and output["loss"].ndim > 0:
        return {**output, "loss": output["loss"].mean()}
    return output


def wrap_data_parallel(module: nn.Module, devices: list[torch.device]) -> nn.Module:
    """``DataParallel`` over ``devices`` (the first gathers), or a plain step wrapper for one CPU device."""
    first = devices[0]
    if first.type == "cpu" or len(devices) == 1:
        return StepRedirect(module)
    ids = [d.index if d.index is not None else i for i, d in enumerate(devices)]
    return nn.DataParallel(StepRedirect(module, primary_device=first), device_ids=ids, output_device=ids[0])


def run_split_step(strategy: Strategy, name: StepName, *args: Any, **kwargs: Any) -> Any:
    """Run a step through the DP wrapper; for training, combine the per-device outputs."""
    with strategy.precision.forward_context():
        output = call_step(strategy.model, name, *args, **kwargs)
    if name == "training_step":
        output = mean_loss(strategy.module.training_step_end(output))  # type: ignore[operator]
    return output


class DataParallelStrategy(Strategy):
    """``torch.nn.DataParallel`` over this machine's devices, in one process.

    Prefer ``ddp``: it is faster on every accelerator. ``dp`` exists for code that relies on one process seeing
    the whole batch.
    """

    name: ClassVar[str] = "dp"

    @override
    def check_config(self) -> None:
        if self.num_nodes > 1:
            raise ConfigError("num_nodes", self.num_nodes, "strategy='dp' runs one process on one machine.",
                              fix="use strategy='ddp2' (DataParallel inside each node, all-reduce across nodes) or "
                                  "strategy='ddp'.")
        if self.accelerator.device_type == "cpu" and len(self.parallel_devices) > 1:
            raise ConfigError("devices", len(self.parallel_devices), "strategy='dp' splits each batch across the "
                              "GPUs of one process; on the CPU there is one device to split across.",
                              fix="use strategy='ddp' with the same devices= to train that many CPU processes, or "
                                  "devices=1.")

    @property
    @override
    def root_device(self) -> torch.device:
        return self.parallel_devices[0] if self.parallel_devices else torch.device("cpu")

    @property
    @override
    def processes_per_node(self) -> int:
        return 1

    @override
    def wrap_module(self, module: nn.Module) -> nn.Module:
        return wrap_data_parallel(module, self.parallel_devices)

    @override
    def run_step(self, name: StepName, *args: Any, **kwargs: Any) -> Any:
        return run_split_step(self, name, *args, **kwargs)

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
