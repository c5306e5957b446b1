"""``single_xla``: one process on one XLA device, and the base of the XLA strategies.

XLA tensors are lazy: operations are recorded into a graph that runs when the step is marked (``torch_xla.sync``)
or when a value is read on the host (``.item()``, ``.cpu()``). Where the step boundary goes decides how many graphs
are compiled and run per training step, so it is decided here once:

- The boundary is the start of every batch (:meth:`SingleXLAStrategy.batch_to_device` syncs, then moves the new
  batch). The previous step's forward, backward, optimizer update and logged values then run as one graph, the same
  graph every step, compiled once. This is where torch_xla's ``MpDeviceLoader`` marks steps too, and it covers
  validation, test and predict batches with the same code.
- Nothing in xtrain's loop reads a value on the host per step (logged values stay tensors until a logger writes
  them), so the only extra graph executions come from user code: a ``float(loss)`` in ``training_step`` cuts the
  step into two cached graphs. It still works; it is just slower.
- Checkpoints are moved to the CPU before they are written, which also runs whatever is pending.

Moving a module to an XLA device replaces its ``Parameter`` objects (XLA tensors cannot share a CPU tensor's
implementation, so ``Module.to`` cannot swap the data in place as it does for CUDA). Optimizers created before the
move (a worker that received a Trainer which had trained before) would then step the old CPU parameters and leave
the module unchanged; :meth:`SingleXLAStrategy.setup_optimizers` points them at the moved parameters.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import torch
from torch import nn
from typing_extensions import override

from xtrain.accelerators._internal.xla_runtime import sync, to_cpu
from xtrain.core.checkpoint_io import PathLike
from xtrain.core.defaults.single_device import SingleDeviceStrategy
from xtrain.core.strategy import Strategy

__all__ = ["SingleXLAStrategy"]

_T = TypeVar("_T")


class SingleXLAStrategy(SingleDeviceStrategy):
    """Train on one XLA device (a TPU core, or XLA's CPU client with ``PJRT_DEVICE=CPU``) in this process.

    The device comes from the accelerator like every strategy's; this class adds the XLA step boundary and
    CPU-side checkpoints (see the module docstring).
    """

    name: ClassVar[str] = "single_xla"
    supported_accelerators: ClassVar[frozenset[str] | None] = frozenset({"xla"})
    max_devices: ClassVar[int | None] = 1

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._replaced: dict[int, tuple[nn.Parameter, nn.Parameter]] = {}

    @override
    def setup(self, module: nn.Module) -> nn.Module:
        before = dict(module.named_parameters())
        model = super().setup(module)
        after = dict(self.module.named_parameters())
        self._replaced = {id(old): (old, after[name]) for name, old in before.items()
                          if name in after and after[name] is not old}
        return model

    @override
    def setup_optimizers(self, optimizers: list[torch.optim.Optimizer]) -> list[torch.optim.Optimizer]:
        """Point optimizers created before the module moved to the XLA device at its moved parameters."""
        if self._replaced:
            for optimizer in optimizers:
                for group in optimizer.param_groups:
                    group["params"] = [self._replaced.get(id(p), (p, p))[1] for p in group["params"]]
                for old, new in self._replaced.values():
                    if old in optimizer.state:
                        optimizer.state[new] = optimizer.state.pop(old)
        return optimizers

    @override
    def batch_to_device(self, batch: _T) -> _T:
        sync()
        return Strategy.batch_to_device(self, batch)

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike) -> None:
        if self.is_global_zero:
            self.checkpoint_io.save_checkpoint(to_cpu(checkpoint), path)

    @override
    def teardown(self) -> None:
        sync()
        super().teardown()
