"""True precisions: the module, the inputs and every tensor the step creates in one dtype.

``64-true`` is for numerics that need float64 (physics, finite-difference gradient checks); ``16-true`` and
``bf16-true`` halve weight and activation memory against float32 at the cost of update precision, since no float32
master copy of the weights is kept (use the ``-mixed`` precisions for that).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, ClassVar

import torch
from torch import nn
from typing_extensions import override

from xtrain.core.precision import Precision
from xtrain.precision._internal.cast import DefaultDtype, cast_floating
from xtrain.precision._internal.hardware import warn_if_slow

__all__ = ["BFloat16TruePrecision", "DoublePrecision", "Float16TruePrecision", "TruePrecision"]


class TruePrecision(Precision):
    """Base of the ``-true`` precisions: convert the module and floating inputs to :attr:`param_dtype`.

    The step runs with ``torch``'s default dtype set to :attr:`param_dtype`, so tensors created inside it
    (``torch.zeros(n)``, ``torch.tensor(0.5)``) match the weights instead of silently promoting the math to float32.
    :meth:`module_init_context` does the same at model creation, so a large model is never built in float32 first.
    Integer and boolean tensors (labels, masks) are never converted.

    Attributes:
        compute_dtype: The dtype weights, inputs and activations are in (the same as :attr:`param_dtype`).
    """

    param_dtype: ClassVar[torch.dtype]
    compute_dtype: ClassVar[torch.dtype]
    has_forward_context: ClassVar[bool] = True
    converts_input: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self._context = DefaultDtype(self.param_dtype)

    @override
    def connect(self, *, device_type: str) -> None:
        super().connect(device_type=device_type)
        warn_if_slow(self.name, device_type, self.param_dtype)

    @override
    def convert_module(self, module: nn.Module) -> nn.Module:
        return module.to(dtype=self.param_dtype)

    @override
    def forward_context(self) -> AbstractContextManager[Any]:
        return self._context

    @override
    def module_init_context(self) -> AbstractContextManager[Any]:
        return DefaultDtype(self.param_dtype)

    @override
    def convert_input(self, data: Any) -> Any:
        return cast_floating(data, self.param_dtype)

    @override
    def convert_output(self, data: Any) -> Any:
        """Floating outputs in the default dtype (float32), as Fabric returns them from a set-up module: a loop
        ported from Fabric computes its loss and comparisons in float32 (the Engine's only use of it)."""
        return cast_floating(data, torch.get_default_dtype(), only=self.compute_dtype)


class DoublePrecision(TruePrecision):
    """``"64-true"``: float64 weights, inputs, activations, gradients and optimizer state, end to end."""

    name: ClassVar[str] = "64-true"
    param_dtype: ClassVar[torch.dtype] = torch.float64
    compute_dtype: ClassVar[torch.dtype] = torch.float64


class Float16TruePrecision(TruePrecision):
    """``"16-true"``: float16 weights and math; half the memory of float32, no loss scaling, no float32 master copy."""

    name: ClassVar[str] = "16-true"
    param_dtype: ClassVar[torch.dtype] = torch.float16
    compute_dtype: ClassVar[torch.dtype] = torch.float16


class BFloat16TruePrecision(TruePrecision):
    """``"bf16-true"``: bfloat16 weights and math; half the memory of float32 with float32's exponent range."""

    name: ClassVar[str] = "bf16-true"
    param_dtype: ClassVar[torch.dtype] = torch.bfloat16
    compute_dtype: ClassVar[torch.dtype] = torch.bfloat16
