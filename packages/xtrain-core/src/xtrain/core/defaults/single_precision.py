"""32-bit floating point: the default precision."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar

from torch import nn
from typing_extensions import override

from xtrain.core.precision import Precision

__all__ = ["SinglePrecision"]


class SinglePrecision(Precision):
    """``"32-true"``: float32 weights and math, nothing converted, no autocast."""

    name: ClassVar[str] = "32-true"
    has_forward_context: ClassVar[bool] = False
    converts_input: ClassVar[bool] = False

    @override
    def convert_module(self, module: nn.Module) -> nn.Module:
        return module

    @override
    def forward_context(self) -> AbstractContextManager[Any]:
        return nullcontext()
