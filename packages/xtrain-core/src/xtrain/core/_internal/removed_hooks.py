"""Lightning 1.x hooks that neither Lightning 2 nor xtrain calls: defining one is refused before the run starts.

Without this check such a hook is an ordinary method that never runs, and what it logged is silently missing (a
monitor on that key then sees nothing). Lightning 2 raises for the same names; the message here names the class,
the hook and where its code goes now. (``*_step_end`` stay hooks: the ``dp`` strategy calls them.)
"""

from __future__ import annotations

from typing import Any
from weakref import WeakSet

from xtrain.core._internal.user_warning import warn_at_user
from xtrain.core.errors import ConfigError

__all__ = ["check_removed_hooks", "warn_uncalled_hooks"]

_COLLECT = "; collect the step outputs yourself (append them to a list attribute in the step, clear it there)"
_MODULE = {
    "training_epoch_end": "on_train_epoch_end()" + _COLLECT,
    "validation_epoch_end": "on_validation_epoch_end()" + _COLLECT,
    "test_epoch_end": "on_test_epoch_end()" + _COLLECT,
    "predict_epoch_end": "on_predict_epoch_end()" + _COLLECT,
    "on_epoch_start": "on_train_epoch_start() (or on_validation_epoch_start(), on_test_epoch_start())",
    "on_epoch_end": "on_train_epoch_end() (or on_validation_epoch_end(), on_test_epoch_end())",
    "on_batch_start": "on_train_batch_start()",
    "on_batch_end": "on_train_batch_end()",
    "on_pretrain_routine_start": "on_fit_start()",
    "on_pretrain_routine_end": "on_fit_start()",
    "on_hpc_save": "on_save_checkpoint()",
    "on_hpc_load": "on_load_checkpoint()",
}
_CALLBACK = {name: where for name, where in _MODULE.items() if name.startswith("on_")} | {
    "on_init_start": "the callback's __init__()",
    "on_init_end": "the callback's __init__()",
    "on_configure_sharded_model": "setup()",
    "on_before_accelerator_backend_setup": "setup()",
    "on_keyboard_interrupt": "on_exception()",
}


# Lightning 2 hooks of the module that xtrain never calls, and where their code goes: warned, since Lightning runs them.
_UNCALLED = {
    "backward": "on_before_backward()/on_after_backward(), or manual optimization with self.manual_backward(loss)",
    "on_validation_model_zero_grad": "nowhere: xtrain releases the gradients before each validation itself",
}


def warn_uncalled_hooks(module: Any) -> None:
    """Warn once per class about a Lightning hook that xtrain never calls (``backward``): ``xtrain migrate`` marks it
    only where it sees the class derive from ``LightningModule``, not through a base class in another file."""
    cls = type(module)
    if cls in _told:
        return
    _told.add(cls)
    for name, where in _UNCALLED.items():
        if callable(getattr(cls, name, None)):
            warn_at_user(f"{cls.__name__} defines {name}(), a Lightning hook that xtrain never calls: what it adds is "
                         f"skipped. Move it to {where}.", UserWarning)


_told: WeakSet[type] = WeakSet()


def check_removed_hooks(module: Any, callbacks: list[Any]) -> None:
    """Refuse a module or callback that defines a hook Lightning 2 removed.

    Raises:
        ConfigError: Naming the class, the hook and the hook that replaces it.
    """
    for owner, argument, removed in ((module, "model", _MODULE), *((cb, "callbacks", _CALLBACK) for cb in callbacks)):
        for name, where in removed.items():
            if callable(getattr(type(owner), name, None)):
                cls = type(owner).__name__
                raise ConfigError(argument, cls, f"defines {name}(), a Lightning 1.x hook that was removed (Lightning "
                                  f"2 refuses it too): it would never be called, and what it logs would be missing.",
                                  fix=f"move its code to {where}. `xtrain migrate` marks these hooks.")
