"""Quoted annotations (``trainer: "pl.Trainer"``): the Lightning names in them, rewritten as a reference in code is.

A string is not code to LibCST, so the names in it are resolved here by the file's Lightning bindings rather than by
the qualified-name metadata the planner uses for code; they record the imports they need on those bindings all the
same, so a name used only in a quoted annotation is still imported.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from xtrain.core._internal.migrate.bindings import Bindings
from xtrain.core._internal.migrate.decisions import Recorder
from xtrain.core._internal.migrate.idioms import Unresolved, rewrite_annotation
from xtrain.core._internal.migrate.lookup import canonical, find

__all__ = ["in_annotation", "plan_quoted_annotation"]


def in_annotation(node: cst.CSTNode, parent: Callable[[cst.CSTNode], cst.CSTNode | None]) -> bool:
    """Whether ``node`` lies in an annotation, ``parent`` giving each node's parent (``None`` at the top)."""
    current: cst.CSTNode | None = node
    while current is not None and not isinstance(current, (cst.BaseStatement, cst.BaseSmallStatement)):
        if isinstance(current, cst.Annotation):
            return True
        current = parent(current)
    return False


def plan_quoted_annotation(out: Recorder, bindings: Bindings, node: cst.SimpleString) -> None:
    """Plan the rewrite of the quoted annotation ``node``, or flag it when it names Lightning's without equivalent."""
    try:
        new = rewrite_annotation(node, lambda name: _name(out, bindings, name))
    except Unresolved as err:
        out.note(node, f"the quoted annotation {node.value} names Lightning's {err}, which has no xtrain "
                       "equivalent: write the type xtrain uses, or remove the annotation")
        return
    if new is not None:
        out.plan.replace[node] = new


def _name(out: Recorder, bindings: Bindings, name: str) -> str | None:
    """What to write for the name ``name`` found in a quoted annotation (``None``: not Lightning's, keep it),
    recording the import it needs as a reference in code would."""
    root, _, rest = name.partition(".")
    binding = bindings.get(root)
    if binding is None:
        return None
    own = binding.target
    if not binding.is_module_import and own is not None and own.kind == "name":
        local = root if binding.asname or own.last == root else out.local(own)
        if local != root:
            binding.alias = local
        out.count(own.label)
        return local + (f".{rest}" if rest else "")
    target = find(canonical(f"{binding.lightning}.{rest}")) if rest else None
    if target is None or target.kind != "name" or (own is not None and own.kind not in ("module", "name")):
        raise Unresolved(name)
    out.count(target.label)
    if own is not None and own.kind == "module" and target.module == own.qualified:
        return f"{root}.{target.last}"
    binding.used_as.add(target.qualified)
    return out.local(target)
