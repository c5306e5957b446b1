"""What the first pass decides and the second carries out: the Lightning bindings and the edits keyed by node.

Kept apart from the planner so that ``apply.py`` reads only these records, never the visitor that fills them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

import libcst as cst

from xtrain.core._internal.migrate.arguments import ArgEdit
from xtrain.core._internal.migrate.lookup import Target

__all__ = ["Binding", "Plan", "Recorder", "dotted"]


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
    first: Binding | None = None    # the earlier import of this name that this one repeats (try/except fallback)
    repeated: bool = False          # whether a later import repeats this one
    resolved: bool = False          # a name without equivalent whose every use was rewritten: its import goes


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
    stars: list[cst.CSTNode] = field(default_factory=list)  # ``from lightning... import *``: flagged, kept
    fallbacks: set[cst.CSTNode] = field(default_factory=set)  # ``try``s of Lightning imports only: become their body
    defaults: dict[cst.CSTNode, cst.BaseExpression] = field(default_factory=dict)  # Param -> default to give it


class Recorder(Protocol):
    """What the planner's helper modules may do to the plan it fills: the one way they record a decision, so that
    notes are kept once a statement and counts and argument edits are all made alike."""

    plan: Plan

    def note(self, node: cst.CSTNode, message: str) -> None:
        """Flag ``node``'s statement with ``message`` (once)."""

    def count(self, label: str) -> None:
        """Count one rewrite of the kind ``label`` for the summary."""

    def local(self, target: Target) -> str:
        """The name to write for ``target``: its own, or an alias when the file binds that name itself."""

    def plan_call(self, call: cst.Call, lightning: str, target: str, edit: ArgEdit | None = None) -> None:
        """Plan ``call``'s arguments as those of Lightning's ``lightning`` passed to xtrain's ``target``."""


def dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{dotted(node.value)}.{node.attr.value}"
    return ""
