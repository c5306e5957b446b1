"""An example third-party precision: float32 weights and activations, faster float32 matmuls.

``torch.set_float32_matmul_precision("high")`` lets float32 matrix multiplications use TensorFloat-32 on NVIDIA
GPUs (and bfloat16-based kernels on CPUs that have them) while every tensor stays float32. It is set only inside
the step and restored after it, so code outside training keeps full float32 matmuls. Lightning cannot take this as
``precision="tf32"``: its precision names are a closed list. Here one entry point in ``pyproject.toml`` does it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, ClassVar

import torch
from torch import nn
from typing_extensions import override

from xtrain.core.precision import Precision

__all__ = ["TF32Precision"]


class _MatmulPrecision(AbstractContextManager[None]):
    def __init__(self, level: str) -> None:
        self._level = level
        self._previous: list[str] = []

    def __enter__(self) -> None:
        self._previous.append(torch.get_float32_matmul_precision())
        torch.set_float32_matmul_precision(self._level)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        torch.set_float32_matmul_precision(self._previous.pop())


class TF32Precision(Precision):
    """``"tf32"``: float32 everywhere; float32 matmuls inside the step may use TensorFloat-32."""

    name: ClassVar[str] = "tf32"
    has_forward_context: ClassVar[bool] = True
    converts_input: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self._context = _MatmulPrecision("high")

    @override
    def convert_module(self, module: nn.Module) -> nn.Module:
        return module

    @override
    def forward_context(self) -> AbstractContextManager[Any]:
        return self._context
