"""Calling ``TrainModule.configure_model`` exactly once per module, in the strategy's init context."""

from __future__ import annotations

from typing import TYPE_CHECKING
from weakref import WeakSet

from torch import nn

if TYPE_CHECKING:
    from xtrain.core.strategy import Strategy

__all__ = ["configure_model", "mark_configured"]

_configured: WeakSet[nn.Module] = WeakSet()


def configure_model(module: nn.Module, strategy: Strategy) -> None:
    """Run ``module.configure_model()`` once: a second fit or a test after fit must not build or shard it again."""
    hook = getattr(module, "configure_model", None)
    if hook is None or module in _configured:
        return
    with strategy.module_init_context():
        hook()
    _configured.add(module)


def mark_configured(module: nn.Module) -> None:
    """Record that ``module.configure_model()`` already ran (``load_from_checkpoint`` calls it before loading)."""
    _configured.add(module)
