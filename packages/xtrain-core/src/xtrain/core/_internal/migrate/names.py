"""Names a file binds itself, so the planner never writes an xtrain name that one of them would shadow.

``class DataModule(pl.LightningDataModule)`` would otherwise become ``class DataModule(DataModule)``: every later
reference to the base class would then mean the user's class. Names are collected over the whole file (any scope),
which may alias a name that only a function's local shadows: an alias is harmless, a shadowed base class is not.
"""

from __future__ import annotations

import libcst as cst

from xtrain.core._internal.migrate.lookup import ROOTS

__all__ = ["bound_names", "free_alias", "lightning_import", "self_assignments"]


def _targets(node: cst.BaseExpression, found: set[str]) -> None:
    if isinstance(node, cst.Name):
        found.add(node.value)
    elif isinstance(node, (cst.Tuple, cst.List)):
        for element in node.elements:
            _targets(element.value, found)
    elif isinstance(node, cst.StarredElement):
        _targets(node.value, found)


class _Bound(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: set[str] = set()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.found.add(node.name.value)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.found.add(node.name.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        _targets(node.target, self.found)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        _targets(node.target, self.found)

    def visit_For(self, node: cst.For) -> None:
        _targets(node.target, self.found)

    def visit_AsName(self, node: cst.AsName) -> None:
        _targets(node.name, self.found)

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            root = cst.Module([]).code_for_node(alias.name).split(".")[0]
            if root not in ROOTS:
                self.found.add(root if alias.asname is None else cst.Module([]).code_for_node(alias.asname.name))
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        module = cst.Module([]).code_for_node(node.module) if node.module is not None else ""
        if node.relative == () and module.split(".")[0] in ROOTS:
            return False  # the planner's own bindings: they are what gets replaced
        if not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                if alias.asname is None and isinstance(alias.name, cst.Name):
                    self.found.add(alias.name.value)
        return True


def _root(node: cst.BaseExpression | None) -> str:
    return cst.Module([]).code_for_node(node).split(".")[0] if node is not None else ""


def lightning_import(statement: cst.CSTNode) -> bool:
    """Whether ``statement`` is a line of imports of Lightning modules only (``import pytorch_lightning as pl``)."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    return all((isinstance(s, cst.Import) and all(_root(a.name) in ROOTS for a in s.names))
               or (isinstance(s, cst.ImportFrom) and s.relative == () and _root(s.module) in ROOTS)
               for s in statement.body)


def bound_names(module: cst.Module) -> set[str]:
    """Every name ``module`` binds by a definition, an assignment or a non-Lightning import."""
    visitor = _Bound()
    module.visit(visitor)
    return visitor.found


def free_alias(name: str, taken: set[str]) -> str:
    """``XtrainDataModule`` for ``DataModule`` (``xtrain_seed_everything`` for a function), numbered if taken."""
    base = f"xtrain_{name}" if name[:1].islower() else f"Xtrain{name}"
    alias, n = base, 2
    while alias in taken:
        alias, n = f"{base}{n}", n + 1
    return alias


def self_assignments(node: cst.ClassDef) -> set[str]:
    """The attributes a class body assigns on ``self`` (and its annotated names): a hook check must not flag them."""
    found: set[str] = set()

    class Finder(cst.CSTVisitor):
        def visit_AssignTarget(self, target: cst.AssignTarget) -> None:
            t = target.target
            if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                found.add(t.attr.value)

        def visit_AnnAssign(self, assign: cst.AnnAssign) -> None:
            t = assign.target
            if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                found.add(t.attr.value)
            elif isinstance(t, cst.Name):
                found.add(t.value)

    node.visit(Finder())
    return found
