"""Whether a module's own code reads parameter gradients, for the fit loop's choice of when to release them.

Lightning zeroes the gradients after ``training_step``, so that step still sees the previous step's ``p.grad``; the
fit loop releases them right after the optimizer step instead when nothing can look (see
``FitLoop._can_release_early``). A module's methods cannot declare that they never read gradients, so their code is
read once per fit: any function of the module's own classes that loads an attribute named ``grad`` or
``grad_norm``, or calls ``autograd.grad``, keeps Lightning's order. The user's code they call is read too: functions
and classes they name from their files' globals, and functions of user modules they name (``helpers.stats(self)``),
following those calls in turn. Library code (xtrain, torch, Lightning, anything installed in ``site-packages`` or
the standard library) is not read: it is not where a script inspects its gradients in passing. Nor is a read the
code does not name (``getattr(p, "grad")``).
"""

from __future__ import annotations

import sys
import sysconfig
import types
from typing import Any

__all__ = ["module_reads_gradients"]

_NAMES = frozenset({"grad", "grad_norm"})
_LIBRARIES = ("xtrain.", "torch.", "lightning.", "pytorch_lightning.")
_MAX_FUNCTIONS = 500  # a bound on the reading (a large user package): past it, the answer is "reads"


def module_reads_gradients(module: Any) -> bool:
    """Whether the code of ``module``'s own classes, of the objects it holds, or the user code they call, names
    ``grad``."""
    scan = _Scan()
    try:
        if any(scan.cls(cls) for cls in type(module).__mro__):
            return True
        # Objects the module holds (``self.tracker = GradTracker()``, its submodules): their classes' code too.
        held = [*vars(module).values(), *getattr(module, "_modules", {}).values()]
        return any(scan.cls(cls) for value in held for cls in type(value).__mro__)
    except Exception:  # noqa: BLE001 - user code of any shape: when in doubt, keep Lightning's order
        return True


class _Scan:
    """One reading: each function is read at most once (recursion, shared helpers)."""

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self._library = tuple({p for key in ("stdlib", "platstdlib", "purelib", "platlib")
                               if (p := sysconfig.get_paths().get(key))})

    def cls(self, cls: type) -> bool:
        home = getattr(sys.modules.get(cls.__module__), "__file__", None)
        if cls is object or id(cls) in self._seen or not self._is_user(cls.__module__, home):
            return False
        self._seen.add(id(cls))
        for value in vars(cls).values():
            if isinstance(value, property):
                functions: tuple[Any, ...] = (value.fget, value.fset, value.fdel)
            else:
                functions = (getattr(value, "__func__", value),)
            if any(self.function(fn) for fn in functions if isinstance(fn, types.FunctionType)):
                return True
        return False

    def function(self, fn: types.FunctionType) -> bool:
        code = fn.__code__
        if id(code) in self._seen or not self._is_user(fn.__module__, code.co_filename):
            return False
        self._seen.add(id(code))
        if len(self._seen) > _MAX_FUNCTIONS:
            return True
        scope = fn.__globals__
        if fn.__closure__:  # names a nested function reads from the function around it
            scope = {**scope, **{name: _contents(cell) for name, cell in zip(code.co_freevars, fn.__closure__, strict=True)}}
        return self._code(code, scope)

    def _code(self, code: types.CodeType, scope: dict[str, Any]) -> bool:
        names = code.co_names
        if not _NAMES.isdisjoint(names):
            return True
        for name in (*names, *code.co_freevars):
            if self._named(scope.get(name), names):
                return True
        return any(self._code(const, scope) for const in code.co_consts if isinstance(const, types.CodeType))

    def _named(self, value: Any, names: tuple[str, ...]) -> bool:
        """Follow a global the code names: a function, a class, or a user module's members named beside it."""
        if isinstance(value, types.FunctionType):
            return self.function(value)
        if isinstance(value, type):
            return self.cls(value)
        if isinstance(value, types.ModuleType) and self._is_user(value.__name__, getattr(value, "__file__", None)):
            members = (vars(value).get(name) for name in names)  # not getattr: a lazy __getattr__ imports
            return any(self._named(member, ()) for member in members if not isinstance(member, types.ModuleType))
        return False

    def _is_user(self, module: str | None, filename: str | None) -> bool:
        if module is None or module.startswith(_LIBRARIES) or module in ("xtrain", "torch", "lightning", "builtins"):
            return False
        return filename is None or not filename.startswith(self._library)


def _contents(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a cell not filled yet
        return None
