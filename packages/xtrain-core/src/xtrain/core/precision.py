"""The Precision contract: how numbers are represented while training.

A precision plugin converts the module and inputs, opens the autocast context on the device type the accelerator
declares, and owns the backward/step path when a gradient scaler is involved. It knows nothing about devices or
processes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar

import torch
from torch import nn

__all__ = ["Precision"]


class Precision(ABC):
    """Base class of every precision plugin.

    Attributes:
        name: The registry name (``"32-true"``, ``"bf16-mixed"``).
        param_dtype: The dtype the module's floating point parameters are converted to, or ``None`` to keep them.
        has_forward_context: ``False`` when :meth:`forward_context` does nothing, so hot paths can skip it.
        converts_input: ``False`` when :meth:`convert_input` returns its argument, so hot paths can skip it.
    """

    name: ClassVar[str]
    param_dtype: ClassVar[torch.dtype | None] = None
    has_forward_context: ClassVar[bool] = True
    converts_input: ClassVar[bool] = True

    def __init__(self) -> None:
        self.device_type = "cpu"

    def connect(self, *, device_type: str) -> None:
        """Receive the autocast device type declared by the accelerator. Called by the validator."""
        self.device_type = device_type

    @abstractmethod
    def convert_module(self, module: nn.Module) -> nn.Module:
        """Convert the module's parameters and buffers (a no-op for mixed precision)."""

    @abstractmethod
    def forward_context(self) -> AbstractContextManager[Any]:
        """The context the forward pass runs in (``torch.autocast`` for mixed precision)."""

    def module_init_context(self) -> AbstractContextManager[Any]:
        """The context a module is created in (``Trainer.init_module``).

        ``-true`` precisions create parameters directly in their dtype here, so a large model is never materialized
        in float32 first; the default changes nothing.
        """
        return nullcontext()

    def convert_input(self, data: Any) -> Any:
        """Convert floating point tensors of a batch to the compute dtype."""
        return data

    def convert_output(self, data: Any) -> Any:
        """Convert what a module returns for the code after its forward (the Engine's loss, computed outside).

        Mixed precisions return floating outputs in float32, as Accelerate and Fabric do: a loss computed from a
        bfloat16 output would be rounded to three digits. The default returns ``data`` as it is.
        """
        return data

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Run the backward pass (scaled when a gradient scaler is used); ``args``/``kwargs`` are
        ``Tensor.backward``'s (``retain_graph=True`` from ``manual_backward``)."""
        loss.backward(*args, **kwargs)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring gradients back to their true scale; called before clipping."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer, *,
                       closure: Callable[[], Any] | None = None) -> bool:
        """Step the optimizer. Returns ``False`` when the step was skipped (non-finite gradients under a scaler).

        ``closure`` is given only to optimizers that cannot step without one (``torch.optim.LBFGS``); it runs
        ``training_step`` and the backward pass each time the optimizer evaluates the loss.
        """
        if closure is not None:
            optimizer.step(closure)
        else:
            optimizer.step()
        return True

    def state_dict(self) -> dict[str, Any]:
        """State to put in checkpoints (a gradient scaler's scale and growth tracker)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""

    def teardown(self) -> None:
        """Release resources."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
