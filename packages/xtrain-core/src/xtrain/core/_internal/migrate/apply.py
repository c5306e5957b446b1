"""Second pass: carry out a ``Plan`` on the module, keeping everything it does not touch byte for byte."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from xtrain.core._internal.migrate.arguments import apply_arguments
from xtrain.core._internal.migrate.decisions import Binding, Plan
from xtrain.core._internal.migrate.names import lightning_import
from xtrain.core._internal.migrate.remainder import kept_lightning, others

__all__ = ["PREFIX", "Applier"]

PREFIX = "# xtrain migrate: "


def _comment(message: str) -> cst.EmptyLine:
    return cst.EmptyLine(indent=True, whitespace=cst.SimpleWhitespace(""), comment=cst.Comment(PREFIX + message))


def _with_notes(node: cst.CSTNodeT, notes: Sequence[str]) -> cst.CSTNodeT:
    lines = list(getattr(node, "leading_lines", ()))
    present = {line.comment.value for line in lines if line.comment is not None}
    added = [_comment(n) for n in notes if PREFIX + n not in present]
    if not added:
        return node
    return node.with_changes(leading_lines=[*lines, *added])


Groups = dict[str, list[tuple[str, str | None]]]


def _import_groups(bindings: list[Binding], aliases: dict[str, str]) -> tuple[Groups, list[str], bool]:
    """What replaces one Lightning import statement: ``{module: [(name, asname)]}``, other statements, and whether
    the original must stay for names xtrain cannot replace; ``aliases`` are the names imported under another local
    name because the file binds the plain one."""
    groups: Groups = {}
    lines: list[str] = []
    keep_original = False

    def add(qualified: str, local: str | None = None) -> None:
        module, _, last = qualified.rpartition(".")
        if module in ("builtins", ""):
            return
        entry = (last, None if local in (None, last) else local)
        names = groups.setdefault(module, [])
        if entry not in names:
            names.append(entry)

    for b in bindings:
        t = b.target
        if b.is_module_import:
            for qualified in sorted(b.used_as):
                add(qualified, aliases.get(qualified))
            keep_original = keep_original or bool(b.unresolved)
            continue
        if t is None or t.kind == "missing":
            keep_original = keep_original or not b.resolved
        elif t.kind == "name":
            add(t.qualified, b.local if b.asname else (b.first or b).alias)
        elif t.kind == "module":
            add(t.qualified, b.local)
            for qualified in sorted(b.used_as):
                add(qualified, aliases.get(qualified))
        elif t.kind == "define":
            lines.append("import importlib.util")
            lines.append(f'{b.local} = importlib.util.find_spec("{t.qualified}") is not None')
    return groups, lines, keep_original


class _LightningImports(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found = False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        self.found = self.found or (lightning_import(node) and not all(isinstance(s, cst.Pass) for s in node.body))
        return False


def _imports_lightning(node: cst.CSTNode) -> bool:
    """Whether a Lightning import is still written anywhere in ``node`` (kept for a name xtrain lacks)."""
    visitor = _LightningImports()
    node.visit(visitor)
    return visitor.found


def _alias(name: str, asname: str | None) -> cst.ImportAlias:
    return cst.ImportAlias(name=cst.Name(name), asname=cst.AsName(cst.Name(asname)) if asname else None)


class Applier(cst.CSTTransformer):
    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.plan = plan
        self._imports: dict[cst.CSTNode, list[Binding]] = {}
        for b in plan.bindings:
            self._imports.setdefault(b.statement, []).append(b)
        self._emitted: set[tuple[str, str, str | None]] = set()
        self._emitted_lines: set[str] = set()
        self._removals: set[int] = set()

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self.plan.replace.get(original_node, updated_node)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        if original_node in self.plan.unwrap:
            return updated_node.value
        new = self.plan.replace.get(original_node)
        if new is None:
            return updated_node
        if isinstance(new, cst.Attribute):
            return updated_node.with_changes(attr=new.attr)
        return new

    def leave_SimpleString(self, original_node: cst.SimpleString,
                           updated_node: cst.SimpleString) -> cst.BaseExpression:
        return self.plan.replace.get(original_node, updated_node)

    def leave_Param(self, original_node: cst.Param, updated_node: cst.Param) -> cst.Param:
        default = self.plan.defaults.get(original_node)
        if default is None:
            return updated_node
        space = cst.SimpleWhitespace(" " if updated_node.annotation is not None else "")
        return updated_node.with_changes(default=default, equal=cst.AssignEqual(space, space))

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        edit = self.plan.calls.get(original_node)
        if edit is None:
            return updated_node
        return updated_node.with_changes(args=apply_arguments(updated_node.args, edit,
                                                              opening=updated_node.whitespace_before_args))

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine,
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        notes = self.plan.notes.get(original_node, [])
        if original_node in self.plan.drop:
            return self._removed(updated_node)
        bindings = self._imports.get(original_node)
        if not bindings:
            return _with_notes(updated_node, notes)
        groups, lines, keep_original = _import_groups(bindings, self.plan.aliases)
        repeats = any(b.first is not None or b.repeated for b in bindings)
        for module, names in groups.items():
            if not repeats:  # each of the repeated imports of a name (try/except) imports all its names again
                names[:] = [n for n in names if (module, *n) not in self._emitted]
            self._emitted.update((module, *n) for n in names)
        groups = {m: n for m, n in groups.items() if n}
        if lines and "import importlib.util" in self._emitted_lines:
            lines.remove("import importlib.util")
        self._emitted_lines.update(lines)
        new: list[cst.BaseStatement] = []
        small = updated_node.body[0]
        if (len(groups) == 1 and not lines and not keep_original and len(updated_node.body) == 1
                and isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar)
                and len(small.names) == len(next(iter(groups.values())))):
            # one module in, one module out: keep the statement's own layout and comments
            module, names = next(iter(groups.items()))
            aliases = [old.with_changes(name=cst.Name(name), asname=cst.AsName(cst.Name(asname)) if asname else None)
                       for old, (name, asname) in zip(small.names, names, strict=True)]
            new.append(updated_node.with_changes(body=[small.with_changes(
                module=cst.parse_expression(module), names=aliases)]))
        else:
            for module, names in groups.items():
                new.append(cst.SimpleStatementLine(body=[cst.ImportFrom(
                    module=cst.parse_expression(module),  # type: ignore[arg-type]
                    names=[_alias(n, a) for n, a in names])]))
            new += [cst.parse_statement(line + "\n") for line in lines]
        kept = kept_lightning(updated_node, bindings) if keep_original else None
        if kept is not None:
            kept = kept.with_changes(leading_lines=())
            new.append(kept)
        noted = len(new) - 1 if kept is not None else 0
        rest, first = others(updated_node)
        if rest is not None:
            if kept is not None:  # the line's own trailing comment stays with the rest of the line, once
                new[-1] = kept.with_changes(trailing_whitespace=cst.TrailingWhitespace())
            noted += first and bool(new)
            new.insert(0 if first else len(new), rest.with_changes(leading_lines=()))
        if not new:
            return self._removed(updated_node) if not notes else _with_notes(
                updated_node.with_changes(body=[cst.Pass()]), notes)
        new[0] = new[0].with_changes(leading_lines=updated_node.leading_lines)
        new[noted] = _with_notes(new[noted], notes)
        if len(new) == 1:
            return new[0].with_changes(trailing_whitespace=updated_node.trailing_whitespace)
        return cst.FlattenSentinel(new)

    def _removed(self, node: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
        """Mark ``node`` for removal; its block removes it and hands its blank lines and comments to the next one."""
        marked = node.with_changes(body=[cst.Pass()])
        self._removals.add(id(marked))
        return marked

    def _sweep(self, body: Sequence[cst.BaseStatement]) -> tuple[list[cst.BaseStatement], bool]:
        out: list[cst.BaseStatement] = []
        carried: list[cst.EmptyLine] = []
        for statement in body:
            if id(statement) in self._removals:
                carried += list(getattr(statement, "leading_lines", ()))
                continue
            if carried:
                statement = statement.with_changes(leading_lines=[*carried, *statement.leading_lines])  # type: ignore[attr-defined]
                carried = []
            out.append(statement)
        return out, len(out) != len(body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        body, changed = self._sweep(updated_node.body)
        header = {line.comment.value for line in updated_node.header if line.comment is not None}
        first = body[0] if body else None
        if isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and any(
                h.startswith(PREFIX) for h in header):
            # LibCST reads the comments above a file's first statement as the module's header: a note written there
            # by an earlier run is not among the statement's own lines, and must not be written twice
            lines = [ln for ln in first.leading_lines if ln.comment is None or ln.comment.value not in header]
            if len(lines) != len(first.leading_lines):
                body, changed = [first.with_changes(leading_lines=lines), *body[1:]], True
        return updated_node.with_changes(body=body) if changed else updated_node

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock,
                            updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        body, changed = self._sweep(updated_node.body)
        if not changed:
            return updated_node
        return updated_node.with_changes(body=body or [cst.SimpleStatementLine(body=[cst.Pass()])])

    def _compound(self, original_node: cst.CSTNode, updated_node: cst.CSTNodeT) -> cst.CSTNodeT:
        return _with_notes(updated_node, self.plan.notes.get(original_node, []))

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        return self._compound(original_node, updated_node)

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        return self._compound(original_node, updated_node)

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If:
        return self._compound(original_node, updated_node)

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        return self._compound(original_node, updated_node)

    def leave_While(self, original_node: cst.While, updated_node: cst.While) -> cst.While:
        return self._compound(original_node, updated_node)

    def leave_With(self, original_node: cst.With, updated_node: cst.With) -> cst.With:
        return self._compound(original_node, updated_node)

    def leave_Try(self, original_node: cst.Try, updated_node: cst.Try,
                  ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        """A ``try`` of Lightning imports only becomes its body once no Lightning import is left in it: both of its
        branches now import the same xtrain names, so the fallback has nothing left to choose between."""
        if original_node not in self.plan.fallbacks or _imports_lightning(updated_node):
            return self._compound(original_node, updated_node)
        body = [s for s in updated_node.body.body if isinstance(s, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
                and not (isinstance(s, cst.SimpleStatementLine) and all(isinstance(b, cst.Pass) for b in s.body))]
        if not body:
            return self._removed(cst.SimpleStatementLine(body=[cst.Pass()], leading_lines=updated_node.leading_lines))
        body[0] = _with_notes(body[0].with_changes(leading_lines=[*updated_node.leading_lines,
                                                                  *body[0].leading_lines]),
                              self.plan.notes.get(original_node, []))
        return cst.FlattenSentinel[cst.BaseStatement](body)
