"""Whether a module's code reads parameter gradients where Lightning still shows the previous step's, for the fit
loop's choice of when to release them.

Lightning zeroes the gradients after ``training_step``, so that step still sees the previous step's ``p.grad``; the
fit loop releases them right after the optimizer step instead when nothing can look (see
``FitLoop._can_release_early``). A module's methods cannot declare that they never read gradients, so their code is
read once per fit, starting from the methods that run between an optimizer step and the next backward pass
(``training_step`` and ``forward``, the batch-transfer hooks, ``lr_scheduler_step``, ``on_save_checkpoint``; the
batch hooks count on their own) and following what they name: the module's other methods and properties
(``self._norm()``), the objects it holds (``self.tracker.update(self)``: their classes are read whole), and the user
code of their files (functions, classes, and the members of user modules: ``helpers.stats(self)``), in turn. Any of
them naming ``grad`` or ``grad_norm`` (``p.grad``, ``torch.autograd.grad``) keeps Lightning's order. Hooks that run
while the gradients are fresh (``on_before_optimizer_step``, ``on_after_backward``, where Lightning's ``grad_norm``
idiom lives) do not count. Library code (xtrain, torch, Lightning, anything under the standard library or
``site-packages``) is not read, nor is a read the code does not name (``getattr(p, "grad")``).
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

__all__ = ["module_reads_gradients"]

_NAMES = frozenset({"grad", "grad_norm"})
_LIBRARIES = frozenset({"xtrain", "torch", "lightning", "pytorch_lightning", "builtins"})  # top-level packages
_MAX_FUNCTIONS = 500  # a bound on the reading (a large user package): past it, the answer is "reads"
# The module's methods that run between an optimizer step and the next backward pass.
_BETWEEN = ("training_step", "forward", "on_before_batch_transfer", "transfer_batch_to_device",
            "on_after_batch_transfer", "lr_scheduler_step", "on_save_checkpoint")


def module_reads_gradients(module: Any) -> bool:
    """Whether the code that runs between ``module``'s optimizer step and its next backward pass names ``grad``."""
    try:
        scan = _Scan(module)
        return any(scan.attribute(name) for name in _BETWEEN)
    except Exception:  # noqa: BLE001 - user code of any shape: when in doubt, keep Lightning's order
        return True


class _Scan:
    """One reading: each function, class and attribute is read at most once (recursion, shared helpers)."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self._seen: set[int] = set()
        self._attributes: set[str] = set()
        from xtrain.core._internal.hang_report import is_library  # its imports are the watchdog's, not start-up's

        self._is_library = is_library

    def attribute(self, name: str) -> bool:
        """Follow ``self.<name>``: a method or property of the module's classes, or an object the module holds."""
        if name in self._attributes:
            return False
        self._attributes.add(name)
        found = inspect.getattr_static(type(self._module), name, None)
        if found is not None and any(self.function(fn) for fn in _functions(found)):
            return True
        held = vars(self._module).get(name, getattr(self._module, "_modules", {}).get(name))
        if held is None:
            return False
        if isinstance(held, types.MethodType):  # a bound method set on the instance
            held = held.__func__
        if isinstance(held, types.FunctionType):  # a function set on the instance (it shadows the class's)
            return any(self.function(fn) for fn in _functions(held))
        return any(self.cls(cls) for cls in type(held).__mro__)

    def cls(self, cls: type) -> bool:
        """Read every function of a user class (a held object's, or one the code names)."""
        home = getattr(sys.modules.get(cls.__module__), "__file__", None)
        if cls is object or id(cls) in self._seen or not self._is_user(cls.__module__, home):
            return False
        self._seen.add(id(cls))
        return any(self.function(fn) for value in vars(cls).values() for fn in _functions(value))

    def function(self, fn: types.FunctionType) -> bool:
        code = fn.__code__
        if id(code) in self._seen or not self._is_user(fn.__module__, code.co_filename):
            return False
        self._seen.add(id(code))
        if len(self._seen) > _MAX_FUNCTIONS:
            return True
        scope = fn.__globals__
        if fn.__closure__:  # names a nested function reads from the function around it
            cells = zip(code.co_freevars, fn.__closure__, strict=True)
            scope = {**scope, **{name: _contents(cell) for name, cell in cells}}
        return self._code(code, scope)

    def _code(self, code: types.CodeType, scope: dict[str, Any]) -> bool:
        names = code.co_names
        if not _NAMES.isdisjoint(names):
            return True
        for name in (*names, *code.co_freevars):
            if self._named(scope.get(name), names):
                return True
        if any(self.attribute(name) for name in names):
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
        if module is None or module.partition(".")[0] in _LIBRARIES:
            return False
        # Code without a file (exec'd, "<string>") is the user's here, though a hang report skips its frames.
        return filename is None or filename.startswith("<") or not self._is_library(filename)


def _functions(value: Any) -> tuple[types.FunctionType, ...]:
    """The plain functions behind a class attribute (a method, static or class method, or property), and the ones
    a decorator wrapped (``functools.wraps`` leaves ``__wrapped__``: a library's wrapper is not read, what it wraps
    is)."""
    if isinstance(value, property):
        candidates: tuple[Any, ...] = (value.fget, value.fset, value.fdel)
    else:
        candidates = (getattr(value, "__func__", value),)
    found: list[types.FunctionType] = []
    for candidate in candidates:
        for _ in range(16):  # a bound on chains (and cycles) of wrappers
            if candidate is None:
                break
            if isinstance(candidate, types.FunctionType):
                found.append(candidate)
            candidate = vars(candidate).get("__wrapped__") if hasattr(candidate, "__dict__") else None
    return tuple(found)


def _contents(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a cell not filled yet
        return None
