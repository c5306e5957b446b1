"""Mixed precision: float32 weights, the forward pass in ``torch.autocast``, a gradient scaler for float16.

The weights and the optimizer stay in float32 (exact updates); ops that autocast lists run in the lower dtype.
float16's narrow exponent range makes small gradients underflow to zero, so ``16-mixed`` multiplies the loss by a
large scale before backward and divides the gradients by it before the step (``torch.amp.GradScaler``); a step
whose gradients overflowed to inf/NaN is skipped and the scale lowered. bfloat16 has float32's range and needs no
scaler.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import torch
from torch import nn
from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.core.precision import Precision
from xtrain.precision._internal.cast import cast_floating
from xtrain.precision._internal.hardware import warn_if_slow
from xtrain.precision._internal.scaling import ScalerState

__all__ = ["BFloat16MixedPrecision", "Float16MixedPrecision", "MixedPrecision"]


class MixedPrecision(Precision):
    """Base of the autocast precisions: the module and inputs are left as they are, the forward is autocast.

    The autocast device type is the one the accelerator declares (``connect(device_type=...)``, called by the
    validator), never guessed from the module's device. Inputs are not converted: autocast casts per op, so ops it
    keeps in float32 (softmax, norms, losses) see the full-precision input.

    Attributes:
        compute_dtype: The dtype autocast runs the listed ops in.
    """

    compute_dtype: ClassVar[torch.dtype]
    param_dtype: ClassVar[torch.dtype | None] = None
    has_forward_context: ClassVar[bool] = True
    converts_input: ClassVar[bool] = False

    @override
    def connect(self, *, device_type: str) -> None:
        if not torch.amp.is_autocast_available(device_type):
            raise ConfigError("precision", self.name, f"needs torch.autocast, which torch {torch.__version__} does not "
                              f"provide for the accelerator's autocast device type {device_type!r}.",
                              fix="choose a '-true' precision or '32-true' for this accelerator.")
        super().connect(device_type=device_type)
        warn_if_slow(self.name, device_type, self.compute_dtype)

    @override
    def convert_module(self, module: nn.Module) -> nn.Module:
        return module

    @override
    def forward_context(self) -> AbstractContextManager[Any]:
        return torch.autocast(self.device_type, dtype=self.compute_dtype)

    @override
    def convert_output(self, data: Any) -> Any:
        return cast_floating(data, torch.float32, only=self.compute_dtype)


class BFloat16MixedPrecision(MixedPrecision):
    """``"bf16-mixed"``: float32 weights, autocast to bfloat16; no gradient scaler (bfloat16 has float32's range)."""

    name: ClassVar[str] = "bf16-mixed"
    compute_dtype: ClassVar[torch.dtype] = torch.bfloat16


class Float16MixedPrecision(MixedPrecision):
    """``"16-mixed"``: float32 weights, autocast to float16, and a ``torch.amp.GradScaler`` on every device.

    The scaler's state (scale and growth tracker) is part of checkpoints and restored exactly on resume. A step
    whose unscaled gradients hold inf or NaN is skipped: :meth:`optimizer_step` returns ``False``, so the loop does
    not step LR schedulers for it, and the scale is multiplied by ``backoff_factor``.

    Args:
        init_scale: The first loss scale.
        growth_factor: Multiplies the scale after ``growth_interval`` steps without inf/NaN gradients.
        backoff_factor: Multiplies the scale after a step with inf/NaN gradients (must be below 1).
        growth_interval: Steps without inf/NaN gradients between two growths.
        scaler: A ready ``GradScaler`` (or subclass, e.g. one that agrees on overflows across shards) to use
            instead of creating one; then the four options above must keep their defaults.
    """

    name: ClassVar[str] = "16-mixed"
    compute_dtype: ClassVar[torch.dtype] = torch.float16

    def __init__(self, *, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, scaler: torch.amp.GradScaler | None = None) -> None:
        super().__init__()
        options = {"init_scale": init_scale, "growth_factor": growth_factor, "backoff_factor": backoff_factor,
                   "growth_interval": growth_interval}
        self._scaling = ScalerState(options, scaler)

    @property
    def scaler(self) -> torch.amp.GradScaler:
        """The gradient scaler, created for the connected device type on first use."""
        return self._scaling.scaler(self.device_type)

    @override
    def connect(self, *, device_type: str) -> None:
        super().connect(device_type=device_type)
        self._scaling.scaler(device_type)

    @override
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        self.scaler.scale(loss).backward(*args, **kwargs)

    @override
    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        self._scaling.unscale(optimizer, self.device_type)

    @override
    def optimizer_step(self, optimizer: torch.optim.Optimizer, *,
                       closure: Callable[[], Any] | None = None) -> bool:
        if closure is not None:
            # GradScaler must unscale and check the gradients between backward and step, which an optimizer that
            # evaluates the loss itself does not allow (as Lightning: AMP refuses LBFGS).
            raise ConfigError("precision", self.name, f"cannot step {type(optimizer).__name__}, an optimizer that "
                              "needs a closure, through a gradient scaler.", choices=["32-true", "bf16-mixed"],
                              fix="train closure optimizers such as LBFGS in 32-true or bf16-mixed precision.")
        return self._scaling.step(optimizer, self.device_type)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler.state_dict()}

    @override
    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "scaler" in state:
            self._scaling.load(state["scaler"], self.device_type)
