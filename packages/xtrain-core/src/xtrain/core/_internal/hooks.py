"""Calling hooks: found once per run, called without lookups on the step path."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from xtrain.core.callbacks.callback import Callback
from xtrain.core.datamodule import DataModule
from xtrain.core.module import TrainModule

if TYPE_CHECKING:
    from xtrain.core.profilers.profiler import Profiler

__all__ = ["HookDispatcher", "overrides"]

_DATAMODULE_HOOKS = frozenset({"on_save_checkpoint", "on_load_checkpoint"})


def overrides(obj: object, base: type, name: str) -> bool:
    """Whether ``obj``'s class replaces ``base``'s method ``name``, or ``obj`` itself was given one
    (``model.val_dataloader = lambda: loader``, as Lightning's ``is_overridden`` accepts)."""
    return name in getattr(obj, "__dict__", ()) or getattr(type(obj), name, None) is not getattr(base, name, None)


class HookDispatcher:
    """For each hook, the bound methods that actually do something, in call order.

    Order: callbacks, then the module, then callbacks marked ``runs_last`` (checkpointing, early stopping), so what
    the module logs in a hook is visible to the callbacks that monitor it. With a ``profiler``, each callable is
    wrapped once, when its hook is first looked up, to time it; without one nothing is wrapped.
    """

    def __init__(self, trainer: Any, module: TrainModule, callbacks: Sequence[Callback], *,
                 profiler: Profiler | None = None) -> None:
        self._trainer = trainer
        self._module = module
        self._callbacks = list(callbacks)
        self._cache: dict[str, tuple[Callable[..., Any], ...]] = {}
        self._profiler = profiler

    def get(self, name: str) -> tuple[Callable[..., Any], ...]:
        """The callables for hook ``name``; each takes the hook's arguments after ``trainer, module``."""
        cached = self._cache.get(name)
        if cached is None:
            first, last = self._callbacks_around(name)
            fns: list[Callable[..., Any]] = [functools.partial(getattr(cb, name), self._trainer, self._module)
                                             for cb in first]
            if overrides(self._module, TrainModule, name):
                fns.append(getattr(self._module, name))
            datamodule = getattr(self._trainer, "datamodule", None)
            if name in _DATAMODULE_HOOKS and datamodule is not None and overrides(datamodule, DataModule, name):
                fns.append(getattr(datamodule, name))
            fns += [functools.partial(getattr(cb, name), self._trainer, self._module) for cb in last]
            if self._profiler is not None:
                fns = self._profiled(name, first, last, fns)
            cached = self._cache[name] = tuple(fns)
        return cached

    def module_hook(self, name: str) -> Callable[..., Any] | None:
        """The module's own implementation of hook ``name`` as it appears in :meth:`get` (profiled or not), for a
        loop that reads its return value; ``None`` when the module does not override it."""
        if not overrides(self._module, TrainModule, name):
            return None
        return self.get(name)[len(self._callbacks_around(name)[0])]

    def may_read_gradients(self, name: str) -> bool:
        """Whether an implementation of hook ``name`` may read parameter gradients: the module's, or a callback's
        that does not declare ``reads_gradients = False``."""
        first, last = self._callbacks_around(name)
        return overrides(self._module, TrainModule, name) or any(cb.reads_gradients for cb in (*first, *last))

    def call_module_first(self, name: str, *args: Any, between: Callable[[], None] | None = None) -> None:
        """Call hook ``name`` on the module and the DataModule, then ``between()``, then on every callback.

        Lightning's order for ``on_load_checkpoint``: the module may rewrite the checkpoint (renamed keys, say)
        and the callbacks see it as the module left it. A resumed fit configures its optimizers ``between``: after
        the module rebuilt what its checkpoint holds, before callbacks that attach to the optimizers (SWA's SWALR).
        """
        fns = self.get(name)
        first, last = (len(callbacks) for callbacks in self._callbacks_around(name))
        for fn in fns[first:len(fns) - last]:
            fn(*args)
        if between is not None:
            between()
        for fn in (*fns[:first], *fns[len(fns) - last:]):
            fn(*args)

    def _callbacks_around(self, name: str) -> tuple[list[Callback], list[Callback]]:
        """The callbacks implementing hook ``name`` that :meth:`get` calls before the module's, and after it
        (``runs_last``: checkpointing, early stopping)."""
        hooked = [cb for cb in self._callbacks if overrides(cb, Callback, name)]
        return [cb for cb in hooked if not cb.runs_last], [cb for cb in hooked if cb.runs_last]

    def _profiled(self, name: str, first: list[Callback], last: list[Callback],
                  fns: list[Callable[..., Any]]) -> list[Callable[..., Any]]:
        from xtrain.core._internal.profiling import profiled

        assert self._profiler is not None
        owners = [f"[Callback]{type(cb).__name__}" for cb in first]
        owners += [f"[{'TrainModule' if getattr(fn, '__self__', None) is self._module else 'DataModule'}]"
                   f"{type(getattr(fn, '__self__', None)).__name__}" for fn in fns[len(first):len(fns) - len(last)]]
        owners += [f"[Callback]{type(cb).__name__}" for cb in last]
        return [profiled(self._profiler, f"{owner}.{name}", fn) for owner, fn in zip(owners, fns, strict=True)]

    def call(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Call every overriding implementation of hook ``name``."""
        for fn in self.get(name):
            fn(*args, **kwargs)

    def call_all(self, name: str, *args: Any) -> Exception | None:
        """Call every implementation of hook ``name``, also after one raises; returns the first error.

        For ``teardown``: a callback that fails to clean up must not keep the module (and the callbacks after it)
        from cleaning up theirs.
        """
        first: Exception | None = None
        for fn in self.get(name):
            try:
                fn(*args)
            except Exception as err:  # noqa: BLE001 - the caller raises it once every hook has run
                first = first or err
        return first

    def call_callbacks(self, name: str, *args: Any) -> None:
        """Call hook ``name`` on callbacks only (hooks the module has under another signature)."""
        for cb in self._callbacks:
            if overrides(cb, Callback, name):
                getattr(cb, name)(self._trainer, self._module, *args)
