"""Classes that derive from a Lightning base: which xtrain base each has, and the hooks they define.

A class is a TrainModule, DataModule or Callback when one of its bases is Lightning's (by import) or a class of the
same file that is one (by name, since the file's own classes have no import). Its hooks are checked against the
installed xtrain, which calls only the hooks it has, and its own names against ``self.x`` (see ``receivers.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from xtrain.core._internal.migrate import installed
from xtrain.core._internal.migrate.decisions import Recorder, dotted
from xtrain.core._internal.migrate.idioms import BATCH_HOOKS, extra_batch_parameter
from xtrain.core._internal.migrate.lookup import canonical, find, rule
from xtrain.core._internal.migrate.names import self_assignments
from xtrain.core._internal.migrate.rules import Action, Section

__all__ = ["Classes", "check_hook", "lightning_base"]

_BASES = ("xtrain.core.TrainModule", "xtrain.core.DataModule", "xtrain.core.Callback")


class Classes:
    """The classes being visited, innermost last, each with its xtrain base (or ``None``) and the names it defines."""

    def __init__(self) -> None:
        self._open: list[tuple[str | None, set[str]]] = []
        self._known: dict[str, str] = {}        # class name in this file -> the xtrain base it derives from

    def enter(self, node: cst.ClassDef, lightning: Sequence[str | None]) -> str | None:
        """Open ``node``, whose bases are the Lightning names ``lightning`` (one a base, ``None`` where it is not
        Lightning's), and return the xtrain base it derives from, if any."""
        base = None
        for arg, q in zip(node.bases, lightning, strict=True):
            base = base or (lightning_base(q) if q else self._known.get(dotted(arg.value)))
        defined = {s.name.value for s in node.body.body if isinstance(s, cst.FunctionDef)} | self_assignments(node)
        self._open.append((base, defined))
        if base is not None:
            self._known[node.name.value] = base
        return base

    def leave(self) -> None:
        self._open.pop()

    def module_defines(self) -> set[str] | None:
        """The names the innermost class defines if it is a TrainModule (so ``self.x`` is the module's), else None."""
        if self._open and self._open[-1][0] == "xtrain.core.TrainModule":
            return self._open[-1][1]
        return None


def lightning_base(lightning: str) -> str | None:
    """The xtrain base that Lightning's class ``lightning`` stands for: its replacement when that is one, the base
    its replacement derives from (``BoringModel``), else one read from the name, since Lightning's own models
    (``DemoModel``) are LightningModules whose subclasses' hooks need the same check. Lightning's other classes
    (a ``ModelCheckpoint``) are not matched by their subclasses, whose hooks are theirs, not a plain Callback's."""
    target = find(lightning)
    replacement = installed.resolve(target.qualified) if target is not None and target.kind == "name" else None
    if target is not None and target.qualified in _BASES:
        return target.qualified
    for base in _BASES[:2]:
        cls = installed.resolve(base)
        if isinstance(replacement, type) and isinstance(cls, type) and issubclass(replacement, cls):
            return base
    last = lightning.rpartition(".")[2]
    if canonical(lightning).startswith("lightning.fabric"):
        return None
    if last.endswith("DataModule"):
        return _BASES[1]
    return _BASES[0] if last.endswith(("Model", "Module")) else None


def check_hook(out: Recorder, method: cst.FunctionDef, base: str) -> None:
    """Flag ``method`` of a ``base`` subclass if xtrain has no such hook or does not call it, and give the Lightning
    1.x ``dataloader_idx`` of a training batch hook the default that Lightning 1.x passed (xtrain passes none)."""
    name = method.name.value
    r = rule(Section.MODULE_API, name)
    if r is not None and r.action is Action.MISSING:
        out.note(method, f"{name}: {r.note}")
    elif r is not None and not installed.exists(f"{base}.{name}") and name not in ("load_from_checkpoint",):
        out.note(method, f"xtrain (the installed xtrain-core {installed.core_version()}) does not call {name}: "
                         "move the code to a hook it calls")
    takes = installed.positional_parameters(f"{base}.{name}") if name in BATCH_HOOKS else None
    extra = extra_batch_parameter(method, len(takes)) if takes is not None else None
    if extra is not None:
        out.plan.defaults[extra] = cst.Integer("0")
        out.count(f"Lightning 1.x {name}(..., {extra.name.value}) -> {extra.name.value}=0 (xtrain does not pass "
                  "it; Lightning 1.x passed 0)")
