"""First pass over a module: find every Lightning import, reference, call and idiom, and decide what each becomes.

The second pass (``apply.py``) only carries the decisions out, keyed by the original nodes, so every decision can
look at the whole file (whether a name is free, whether every use of ``import lightning as L`` was understood).

The planner walks the file and resolves references by import; what is decided from other evidence lives beside it
and records through its :class:`~xtrain.core._internal.migrate.decisions.Recorder` interface: which import a name's
uses belong to (``bindings.py``), attributes of a Trainer, Fabric or ``self`` (``receivers.py``), the hooks of the
classes that derive from Lightning's (``classes.py``) and the names in quoted annotations (``quoted.py``).
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import ParentNodeProvider, PositionProvider, QualifiedNameProvider, QualifiedNameSource

from xtrain.core._internal.migrate.arguments import ArgEdit, plan_arguments, positional_note
from xtrain.core._internal.migrate.bindings import Bindings, imports, is_fallback, leftover_notes
from xtrain.core._internal.migrate.classes import Classes, check_hook
from xtrain.core._internal.migrate.decisions import Binding, Plan, dotted
from xtrain.core._internal.migrate.idioms import trainer_fn_value
from xtrain.core._internal.migrate.lookup import ROOTS, Target, canonical, find, rule, rules
from xtrain.core._internal.migrate.names import bound_names, free_alias
from xtrain.core._internal.migrate.quoted import in_annotation, plan_quoted_annotation
from xtrain.core._internal.migrate.receivers import Receivers, plan_receiver_attribute
from xtrain.core._internal.migrate.resume import ResumeMoves
from xtrain.core._internal.migrate.rules import Section

__all__ = ["Binding", "Plan", "Planner"]


_READ_KEYWORDS = ("ckpt_path", "resume_from_checkpoint", "checkpoint_path")
_READ_CALLS = ("load_from_checkpoint", "load", "read_checkpoint")


class Planner(cst.CSTVisitor):
    """Fills :attr:`plan` from one visit of a module wrapped with its metadata (``MetadataWrapper.visit``)."""

    METADATA_DEPENDENCIES = (QualifiedNameProvider, ParentNodeProvider, PositionProvider)

    def __init__(self) -> None:
        super().__init__()
        self.plan = Plan()
        self._locals = Bindings()
        self._classes = Classes()
        self._receivers = Receivers()
        self._resume = ResumeMoves()
        self._taken: set[str] = set()
        self._deferred: list[tuple[cst.CSTNode, Binding, str]] = []   # notes given only if a use stays flagged

    # -- helpers ---------------------------------------------------------------------------------------------------
    def _qname(self, node: cst.CSTNode) -> str | None:
        for q in self.get_metadata(QualifiedNameProvider, node, set()):
            if q.source is QualifiedNameSource.IMPORT and q.name.split(".")[0] in ROOTS:
                return canonical(q.name)
        return None

    def _statement(self, node: cst.CSTNode) -> cst.CSTNode:
        current: cst.CSTNode = node
        while not isinstance(current, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            current = self.get_metadata(ParentNodeProvider, current)
        return current

    def note(self, node: cst.CSTNode, message: str) -> None:
        statement = self._statement(node)
        messages = self.plan.notes.setdefault(statement, [])
        if message not in messages:
            messages.append(message)
            self.plan.attention.append((self.get_metadata(PositionProvider, node).start.line, message))

    def count(self, label: str) -> None:
        self.plan.counts[label] += 1

    def visit_Module(self, node: cst.Module) -> None:
        self._taken = bound_names(node)

    def local(self, target: Target) -> str:
        """The name to write for ``target``: its own, or an alias when the file binds that name itself."""
        if target.last not in self._taken:
            return target.last
        if target.qualified not in self.plan.aliases:
            alias = free_alias(target.last, self._taken | set(self.plan.aliases.values()))
            self.plan.aliases[target.qualified] = alias
            self.count(f"{target.qualified} imported as {alias} (the file binds {target.last} itself)")
        return self.plan.aliases[target.qualified]

    # -- imports ---------------------------------------------------------------------------------------------------
    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        for binding in imports(node):
            if isinstance(binding, str):
                self.plan.stars.append(node)
                found = find(binding)
                where = found.qualified if found is not None and found.kind == "module" else "xtrain.core"
                self.note(node, f"`from {binding} import *`: import the names you use from {where} instead "
                                "(the tool cannot tell which names a * import brings, so it renames none of them)")
                continue
            self.plan.bindings.append(binding)
            self._locals.bind(binding)
            target = binding.target
            if binding.is_module_import:
                continue
            if target is not None and target.kind == "missing" and binding.lightning.endswith(".TrainerFn"):
                self._deferred.append((node, binding, target.note))  # its members become strings
            elif target is None or target.kind == "missing":
                self.note(node, target.note if target else f"{binding.lightning} has no xtrain equivalent")
            elif target.kind == "define":
                self.count(target.label)
        return True

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_Try(self, node: cst.Try) -> None:
        if is_fallback(node):
            self.plan.fallbacks.add(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    # -- references ------------------------------------------------------------------------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> bool:
        qname = self._qname(node)
        value = trainer_fn_value(qname) if qname is not None else None
        if value is not None:
            self.plan.replace[node] = cst.SimpleString(f'"{value}"')
            self.count(f"TrainerFn.{qname.split('.TrainerFn.')[1]} -> \"{value}\"")  # type: ignore[union-attr]
            return False
        if qname is None:
            plan_receiver_attribute(self, node, self.get_metadata(ParentNodeProvider, node), self._receivers,
                                    self._resume, self._classes.module_defines())
            return True
        root = dotted(node).split(".")[0]
        binding = self._locals.get(root)
        if binding is None:
            return True
        if binding.target is not None and binding.target.kind == "module":
            # ``callbacks.X`` with ``from lightning.pytorch import callbacks``: rename the attribute in place.
            if not isinstance(node.value, cst.Name):
                return True
            target = find(qname)
            if target is None:
                return True
            self._module_attribute(node, binding, target)
            return False
        target = find(qname)
        if target is None:
            return True
        if not binding.is_module_import:
            return True
        if target.kind == "name":
            binding.used_as.add(target.qualified)
            self.plan.replace[node] = cst.Name(self.local(target))
            self.count(target.label)
            self._check_call_arguments(node, target)
            return False
        if target.kind == "module":
            return True
        binding.unresolved.append(dotted(node))
        self.note(node, target.note or f"{dotted(node)} has no xtrain equivalent")
        return False

    def _module_attribute(self, node: cst.Attribute, binding: Binding, target: Target) -> None:
        assert binding.target is not None
        if target.kind == "name" and target.module == binding.target.qualified:
            if target.last != node.attr.value:
                self.plan.replace[node] = node.with_changes(attr=cst.Name(target.last))
                self.count(target.label)
            self._check_call_arguments(node, target)
        elif target.kind == "name":
            binding.used_as.add(target.qualified)
            self.plan.replace[node] = cst.Name(self.local(target))
            self.count(target.label)
        else:
            self.note(node, target.note or f"{dotted(node)} has no xtrain equivalent")

    def visit_Name(self, node: cst.Name) -> bool:
        binding = self._locals.get(node.value)
        if binding is None or binding.is_module_import or self._qname(node) is None:
            return True
        target = binding.target
        if target is None:
            return True
        if target.kind == "name":
            if not binding.asname and target.last != node.value:
                binding.alias = self.local(target)
                self.plan.replace[node] = cst.Name(binding.alias)
            self.count(target.label)
            self._check_call_arguments(node, target)
        elif target.kind == "missing":
            binding.unresolved.append(node.value)
            self.note(node, target.note)
        elif target.kind == "drop":
            statement = self._statement(node)
            call = getattr(getattr(statement, "body", [None])[0], "value", None)
            if isinstance(statement, cst.SimpleStatementLine) and isinstance(call, cst.Call) and call.func is node:
                self.plan.drop.add(statement)
                self.count(target.label)
            else:
                self.note(node, target.note)
        return True

    def _check_call_arguments(self, node: cst.BaseExpression, target: Target) -> None:
        parent = self.get_metadata(ParentNodeProvider, node)
        if isinstance(parent, cst.Attribute) and parent.value is node and target.qualified == "xtrain.core.Trainer":
            self._trainer_classmethod(parent)
            return
        if not isinstance(parent, cst.Call) or parent.func is not node:
            return
        lightning = (target.lightning or target.qualified).rpartition(".")[2]
        self.plan_call(parent, lightning, target.qualified)
        too_many = positional_note(list(parent.args), target=target.qualified)
        if too_many is not None:
            self.note(parent, too_many)
        if lightning == "Trainer":
            self._trainer_call(parent)

    def _trainer_classmethod(self, node: cst.Attribute) -> None:
        """``Trainer.from_argparse_args(args, gpus=2)`` (Lightning 1.x): flagged, and its keywords migrated as
        Trainer arguments, since they are the same arguments under another call."""
        r = rule(Section.TRAINER_API, node.attr.value)
        if r is None or r.xtrain is not None:
            return
        self.note(node, f"Trainer.{node.attr.value}: {r.note}")
        call = self.get_metadata(ParentNodeProvider, node)
        if node.attr.value == "from_argparse_args" and isinstance(call, cst.Call) and call.func is node:
            self.plan_call(call, "Trainer", "xtrain.core.Trainer")
            self._trainer_call(call)

    def _trainer_call(self, call: cst.Call) -> None:
        parent = self.get_metadata(ParentNodeProvider, call)
        targets = parent.targets if isinstance(parent, cst.Assign) else ()
        name = dotted(targets[0].target) if len(targets) == 1 else ""
        self._resume.trainer(call, name or None)

    def leave_Module(self, original_node: cst.Module) -> None:
        moved, advice = self._resume.resolve(self.plan.calls)
        if moved:
            self.plan.counts["Trainer(resume_from_checkpoint=) -> trainer.fit(ckpt_path=)"] += moved
        for call, message in advice:
            self.note(call, message)
        for node, message in leftover_notes(self.plan.bindings, self._deferred):
            self.note(node, message)

    def plan_call(self, call: cst.Call, lightning: str, target: str, edit: ArgEdit | None = None) -> None:
        edit = edit if edit is not None else plan_arguments(list(call.args), lightning=lightning, target=target)
        if edit:
            self.plan.calls[call] = edit
            for label in edit.counts:
                self.count(label)
            for message in edit.notes:
                self.note(call, message)

    # -- receivers and classes -----------------------------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call):
            self._receivers.assigned(self._qname(node.value.func), (dotted(t.target) for t in node.targets))

    def visit_Param(self, node: cst.Param) -> None:
        if node.annotation is not None:
            self._receivers.annotated(self._qname(node.annotation.annotation), node.name.value)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        base = self._classes.enter(node, [self._qname(arg.value) for arg in node.bases])
        if base is None:
            return
        for statement in node.body.body:
            if isinstance(statement, cst.FunctionDef):
                check_hook(self, statement, base)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._classes.leave()

    # -- strings: quoted annotations, the log directory ----------------------------------------------------------------------------
    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if self.plan.bindings and in_annotation(node, lambda n: self.get_metadata(ParentNodeProvider, n, None)):
            plan_quoted_annotation(self, self._locals, node)
            return
        if "lightning_logs" in node.value and self.plan.bindings and not self._reads_a_file(node):
            self.plan.replace[node] = node.with_changes(value=node.value.replace("lightning_logs", "xtrain_logs"))
            self.count(rules(Section.BEHAVIOUR)["lightning_logs/"].lightning + " -> xtrain_logs/")

    def _reads_a_file(self, node: cst.SimpleString) -> bool:
        """A checkpoint the script loads (``ckpt_path=``, ``load_from_checkpoint(path)``) exists where Lightning
        wrote it: only the directories the run writes to move to ``xtrain_logs``."""
        arg = self.get_metadata(ParentNodeProvider, node, None)
        if not isinstance(arg, cst.Arg):
            return False
        if arg.keyword is not None:
            return arg.keyword.value in _READ_KEYWORDS
        call = self.get_metadata(ParentNodeProvider, arg, None)
        func = call.func if isinstance(call, cst.Call) else None
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        return name in _READ_CALLS
