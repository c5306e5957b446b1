"""Calling ``TrainModule.configure_model`` at every stage, in the strategy's init context."""

from __future__ import annotations

from typing import TYPE_CHECKING
from weakref import WeakSet

from torch import nn

from xtrain.core._internal.user_warning import warn_at_user
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.strategy import Strategy

__all__ = ["configure_model", "mark_configured"]

_configured: WeakSet[nn.Module] = WeakSet()


def configure_model(module: nn.Module, strategy: Strategy) -> None:
    """Run ``module.configure_model()`` at the start of a stage: every fit, validate, test and predict, as Lightning
    does (the hook is to be idempotent: build the layers only when they do not exist yet). Lightning's deprecated
    ``configure_sharded_model`` is called first, with Lightning's deprecation warning, rather than silently never
    (a module that builds its layers there would otherwise fail far from the cause: "empty parameter list")."""
    legacy = getattr(module, "configure_sharded_model", None)
    if legacy is not None and _overridden(module, "configure_sharded_model"):
        _check_legacy_hook(module)
        with strategy.module_init_context():
            legacy()
    hook = getattr(module, "configure_model", None)
    if hook is None:
        return
    with strategy.module_init_context():
        hook()
    _configured.add(module)


def _overridden(module: nn.Module, hook: str) -> bool:
    """Whether ``module`` defines ``hook`` itself (any method of a plain ``nn.Module``; not TrainModule's own)."""
    from xtrain.core.module import TrainModule

    return not isinstance(module, TrainModule) or getattr(type(module), hook) is not getattr(TrainModule, hook)


def _check_legacy_hook(module: nn.Module) -> None:
    name = type(module).__name__
    if _overridden(module, "configure_model") and hasattr(module, "configure_model"):
        raise ConfigError("configure_sharded_model", f"{name}.configure_sharded_model",
                          "is Lightning's deprecated name of configure_model, and both are defined.",
                          fix=f"move its code into {name}.configure_model and delete configure_sharded_model.")
    warn_at_user(f"{name}.configure_sharded_model is deprecated (as in Lightning 2.1+): it is called, but rename it "
                 f"configure_model, which builds the layers on the right device and dtype.", UserWarning)


def mark_configured(module: nn.Module) -> None:
    """Record that ``module.configure_model()`` already ran (``load_from_checkpoint`` calls it before loading)."""
    _configured.add(module)
