"""``precision="fp8-sim"``: study fp8 rounding on any hardware.

Weights and activations stay float32 tensors, but every ``nn.Linear`` rounds its input, weight and output to
float8 (e4m3) values in the forward pass. Gradients pass straight through the rounding (the straight-through
estimator), so the optimizer updates full-precision master weights.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar

import torch
from torch import nn
from typing_extensions import override

from xtrain.core.precision import Precision

FP8 = torch.float8_e4m3fn


def round_to_fp8(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` rounded to the nearest float8 value (clamped to its range), with an identity gradient."""
    limit = torch.finfo(FP8).max
    rounded = tensor.detach().clamp(-limit, limit).to(FP8).to(tensor.dtype)
    return tensor + (rounded - tensor).detach()


class FP8Linear(nn.Linear):
    """A Linear layer computing with fp8-rounded input and weight and rounding its output."""

    @override
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        bias = self.bias if self.bias is None else round_to_fp8(self.bias)
        return round_to_fp8(nn.functional.linear(round_to_fp8(input), round_to_fp8(self.weight), bias))


class SimulatedFP8Precision(Precision):
    """Simulated fp8 (e4m3) in every Linear layer; float32 master weights."""

    name: ClassVar[str] = "fp8-sim"
    param_dtype: ClassVar[torch.dtype | None] = None  # parameters stay float32
    has_forward_context: ClassVar[bool] = False  # the rounding lives in the converted layers
    converts_input: ClassVar[bool] = False

    @override
    def convert_module(self, module: nn.Module) -> nn.Module:
        for layer in module.modules():
            if type(layer) is nn.Linear:
                layer.__class__ = FP8Linear  # same parameters and state_dict keys, fp8 forward
        return module

    @override
    def forward_context(self) -> AbstractContextManager[Any]:
        return nullcontext()
