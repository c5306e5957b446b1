"""Whether a module's own code reads parameter gradients, for the fit loop's choice of when to release them.

Lightning zeroes the gradients after ``training_step``, so that step still sees the previous step's ``p.grad``; the
fit loop releases them right after the optimizer step instead when nothing can look (see
``FitLoop._can_release_early``). A module's methods cannot declare that they never read gradients, so their code is
read once per fit: any function defined in the module's own classes (not xtrain's, not torch's) that loads an
attribute named ``grad`` or ``grad_norm``, or calls ``autograd.grad``, keeps Lightning's order. Code the module
calls elsewhere (a helper in another file) is not seen.
"""

from __future__ import annotations

import types
from typing import Any

__all__ = ["module_reads_gradients"]

_NAMES = frozenset({"grad", "grad_norm"})
_LIBRARIES = ("xtrain.", "torch.", "lightning.", "pytorch_lightning.")


def module_reads_gradients(module: Any) -> bool:
    """Whether a method (or property, static or class method) of ``module``'s own classes names ``grad``."""
    for cls in type(module).__mro__:
        if cls is object or cls.__module__.startswith(_LIBRARIES):
            continue
        for value in vars(cls).values():
            if isinstance(value, property):
                functions: tuple[Any, ...] = (value.fget, value.fset, value.fdel)
            else:
                functions = (getattr(value, "__func__", value),)
            if any(_names_gradients(getattr(fn, "__code__", None)) for fn in functions):
                return True
    return False


def _names_gradients(code: types.CodeType | None) -> bool:
    if code is None:
        return False
    if not _NAMES.isdisjoint(code.co_names):
        return True
    return any(_names_gradients(const) for const in code.co_consts if isinstance(const, types.CodeType))
