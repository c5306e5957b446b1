"""Calling ``TrainModule.configure_model`` at every stage, in the strategy's init context."""

from __future__ import annotations

from typing import TYPE_CHECKING
from weakref import WeakSet

from torch import nn

if TYPE_CHECKING:
    from xtrain.core.strategy import Strategy

__all__ = ["configure_model", "mark_configured"]

_configured: WeakSet[nn.Module] = WeakSet()


def configure_model(module: nn.Module, strategy: Strategy) -> None:
    """Run ``module.configure_model()`` at the start of a stage: every fit, validate, test and predict, as Lightning
    does (the hook is to be idempotent: build the layers only when they do not exist yet)."""
    hook = getattr(module, "configure_model", None)
    if hook is None:
        return
    with strategy.module_init_context():
        hook()
    _configured.add(module)


def mark_configured(module: nn.Module) -> None:
    """Record that ``module.configure_model()`` already ran (``load_from_checkpoint`` calls it before loading)."""
    _configured.add(module)
