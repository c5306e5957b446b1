"""Lightning 1.x hooks that neither Lightning 2 nor xtrain calls: defining one is refused before the run starts.

Without this check such a hook is an ordinary method that never runs, and what it logged is silently missing (a
monitor on that key then sees nothing). Lightning 2 raises for the same names; the message here names the class,
the hook and where its code goes now. (``*_step_end`` stay hooks: the ``dp`` strategy calls them.)
"""

from __future__ import annotations

from typing import Any

from xtrain.core.errors import ConfigError

__all__ = ["check_removed_hooks"]

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
