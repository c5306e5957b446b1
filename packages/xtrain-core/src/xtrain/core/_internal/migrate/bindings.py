"""The Lightning names a file binds by import, and how repeated imports of one name share their uses.

Kept apart from the planner because it is the one place that decides which import statement a use belongs to: a
``try: import lightning.pytorch as pl`` / ``except ImportError: import pytorch_lightning as pl`` fallback (or the same
import in two functions) binds ``pl`` twice, and whichever statement runs must import the xtrain names the uses need.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import libcst as cst

from xtrain.core._internal.migrate.decisions import Binding, dotted
from xtrain.core._internal.migrate.lookup import ROOTS, canonical, find
from xtrain.core._internal.migrate.names import lightning_import
from xtrain.core._internal.migrate.remainder import kept_lightning

__all__ = ["Bindings", "imports", "is_fallback", "leftover_notes"]


def imports(node: cst.SimpleStatementLine) -> Iterator[Binding | str]:
    """Each Lightning binding of ``node``'s import statements, in order, and the module of each ``*`` import (a
    string: the names it brings cannot be known, so it binds none); relative and other imports are passed over."""
    for small in node.body:
        if isinstance(small, cst.Import):
            for alias in small.names:
                name = dotted(alias.name)
                if name.split(".")[0] not in ROOTS:
                    continue
                local = alias.asname.name.value if alias.asname else name.split(".")[0]  # type: ignore[union-attr]
                bound = name if alias.asname else name.split(".")[0]
                yield Binding(node, local, canonical(bound), False, None, True)
        elif isinstance(small, cst.ImportFrom) and small.module is not None and small.relative == ():
            module = dotted(small.module)
            if module.split(".")[0] not in ROOTS:
                continue
            if isinstance(small.names, cst.ImportStar):
                yield module
                continue
            for alias in small.names:
                name = dotted(alias.name)
                local = alias.asname.name.value if alias.asname else name  # type: ignore[union-attr]
                lightning = canonical(f"{module}.{name}")
                yield Binding(node, local, lightning, alias.asname is not None, find(lightning), False)


class Bindings:
    """The first Lightning binding of each local name, which the uses of that name are recorded on."""

    def __init__(self) -> None:
        self._first: dict[str, Binding] = {}

    def get(self, local: str) -> Binding | None:
        """The binding that the uses of ``local`` are recorded on (the first import of it), if Lightning's."""
        return self._first.get(local)

    def bind(self, binding: Binding) -> None:
        """Record ``binding``; a repeat of an earlier Lightning import of the same name shares the first one's uses,
        so that each of the statements imports what the uses need: whichever of them runs, the xtrain names are bound
        (the last one alone would bind them only in the ``except``)."""
        earlier = self._first.get(binding.local)
        if (earlier is not None and earlier.is_module_import == binding.is_module_import
                and earlier.lightning == binding.lightning and earlier.asname == binding.asname):
            first = earlier.first or earlier
            binding.first, binding.used_as, binding.unresolved = first, first.used_as, first.unresolved
            first.repeated = True
            return
        self._first[binding.local] = binding


def is_fallback(node: cst.Try) -> bool:
    """Whether ``node`` is a fallback between two spellings of one module: a ``try`` whose body and handlers are all
    Lightning imports, which, once both become the same xtrain import, is replaced by its body (unless an import
    stays)."""
    blocks = [node.body, *(h.body for h in node.handlers)]
    return node.orelse is None and node.finalbody is None and all(
        isinstance(b, cst.IndentedBlock) and bool(b.body) and all(lightning_import(s) for s in b.body)
        for b in blocks)


def leftover_notes(bindings: Sequence[Binding],
                   deferred: Sequence[tuple[cst.CSTNode, Binding, str]]) -> list[tuple[cst.CSTNode, str]]:
    """The notes that only the whole file decides, as ``(node, message)``.

    A deferred note (an import whose every use may be rewritten, such as ``TrainerFn``) is given only if a use stays
    flagged, else its binding is marked resolved so that its import goes; a module import kept for flagged uses says
    to delete it once those lines are rewritten.
    """
    notes: list[tuple[cst.CSTNode, str]] = []
    for statement, binding, message in deferred:
        if binding.unresolved:
            notes.append((statement, message))
        else:
            binding.resolved = True
    for b in bindings:
        if b.is_module_import and b.unresolved:
            kept = kept_lightning(b.statement, [b])
            code = "; ".join(cst.Module([]).code_for_node(s) for s in kept.body) if kept else b.local
            notes.append((b.statement, f"`{code}` stays only for the flagged {', '.join(sorted(set(b.unresolved)))}: "
                                       f"delete it once those lines are rewritten"))
    return notes
