"""A callback made of functions, for one-off hooks without a class."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xtrain.core.callbacks.callback import Callback
from xtrain.core.errors import ConfigError

__all__ = ["LambdaCallback"]

_HOOKS = sorted(name for name in vars(Callback) if name.startswith("on_") or name in ("setup", "teardown"))


class LambdaCallback(Callback):
    """Runs the given functions at the hooks they are named after.

    ``LambdaCallback(on_train_epoch_end=lambda trainer, module: print(trainer.current_epoch))``. Each function takes
    the hook's arguments (``trainer, module, ...``). Only the given hooks are called: the instance gets its own class
    whose methods are these functions, so the Trainer skips every other hook as for any callback.
    """

    def __init__(self, **hooks: Callable[..., Any]) -> None:
        unknown = sorted(set(hooks) - set(_HOOKS))
        if unknown:
            raise ConfigError(unknown[0], hooks[unknown[0]], "is not a callback hook.", choices=_HOOKS,
                              fix="name the function after one of the hooks.")
        for name, fn in hooks.items():
            if not callable(fn):
                raise ConfigError(name, fn, "is not callable.", fix=f"pass {name}=lambda trainer, module, ...: ...")
        methods = {name: _method(fn) for name, fn in hooks.items()}
        self.__class__ = type("LambdaCallback", (LambdaCallback,), {**methods, "__qualname__": "LambdaCallback"})
        self.hooks = dict(hooks)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.hooks,))


def _rebuild(hooks: dict[str, Callable[..., Any]]) -> LambdaCallback:
    return LambdaCallback(**hooks)


def _method(fn: Callable[..., Any]) -> Callable[..., Any]:
    def hook(self: LambdaCallback, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return hook
