"""What the first pass decides and the second carries out: the Lightning bindings and the edits keyed by node.

Kept apart from the planner so that ``apply.py`` reads only these records, never the visitor that fills them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import libcst as cst

from xtrain.core._internal.migrate.arguments import ArgEdit
from xtrain.core._internal.migrate.lookup import Target

__all__ = ["Binding", "Plan", "dotted"]


@dataclass
class Binding:
    """One name bound by a Lightning import statement."""

    statement: cst.SimpleStatementLine
    local: str
    lightning: str
    asname: bool
    target: Target | None
    is_module_import: bool          # ``import lightning as L`` rather than ``from ... import``
    unresolved: list[str] = field(default_factory=list)
    used_as: set[str] = field(default_factory=set)   # qualified xtrain names its references need imported
    alias: str | None = None        # the local name of its xtrain import when the file binds the plain one


@dataclass
class Plan:
    bindings: list[Binding] = field(default_factory=list)
    replace: dict[cst.CSTNode, cst.BaseExpression] = field(default_factory=dict)
    calls: dict[cst.Call, ArgEdit] = field(default_factory=dict)
    notes: dict[cst.CSTNode, list[str]] = field(default_factory=dict)
    drop: set[cst.CSTNode] = field(default_factory=set)
    unwrap: set[cst.CSTNode] = field(default_factory=set)   # ``a.b`` that becomes ``a``
    aliases: dict[str, str] = field(default_factory=dict)   # qualified xtrain name -> local alias
    counts: Counter[str] = field(default_factory=Counter)
    attention: list[tuple[int, str]] = field(default_factory=list)


def dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{dotted(node.value)}.{node.attr.value}"
    return ""
