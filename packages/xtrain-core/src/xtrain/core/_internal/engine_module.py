"""The module wrapper the Engine returns: the original module's interface, the strategy's forward path."""

from __future__ import annotations

from typing import Any

from torch import nn

from xtrain.core.precision import Precision

__all__ = ["EngineModule", "unwrap"]


class EngineModule(nn.Module):
    """Calls the strategy-wrapped module (DDP, FSDP) under the precision's forward context, and hands its output
    through the precision's ``convert_output`` (float32 under a mixed precision, as Accelerate and Fabric return it).

    Attribute access and ``state_dict`` go to the original module, so the wrapper can be used like it and saves
    without wrapper prefixes.
    """

    def __init__(self, forward_module: nn.Module, original: nn.Module, precision: Precision) -> None:
        super().__init__()
        self.forward_module = forward_module
        self._original = [original]
        self._precision = precision
        self._converts_output = type(precision).convert_output is not Precision.convert_output
        self._plain = not (precision.has_forward_context or precision.converts_input or self._converts_output)

    @property
    def module(self) -> nn.Module:
        """The module that was passed to ``Engine.setup``."""
        return self._original[0]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._plain:
            return self.forward_module(*args, **kwargs)
        precision = self._precision
        if precision.converts_input:
            args, kwargs = precision.convert_input((args, kwargs))
        with precision.forward_context():
            output = self.forward_module(*args, **kwargs)
        return precision.convert_output(output) if self._converts_output else output

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.load_state_dict(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._original[0], name)


def unwrap(module: nn.Module) -> nn.Module:
    """The user's module inside an :class:`EngineModule` (or the module itself)."""
    return module.module if isinstance(module, EngineModule) else module
