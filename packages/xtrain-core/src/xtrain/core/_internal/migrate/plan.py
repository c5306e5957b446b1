"""First pass over a module: find every Lightning import, reference, call and idiom, and decide what each becomes.

The second pass (``apply.py``) only carries the decisions out, keyed by the original nodes, so every decision can
look at the whole file (whether a name is free, whether every use of ``import lightning as L`` was understood).
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import ParentNodeProvider, PositionProvider, QualifiedNameProvider, QualifiedNameSource

from xtrain.core._internal.migrate import installed
from xtrain.core._internal.migrate.arguments import ArgEdit, plan_arguments, positional_note
from xtrain.core._internal.migrate.decisions import Binding, Plan, dotted
from xtrain.core._internal.migrate.fabric_args import fabric_method_arguments
from xtrain.core._internal.migrate.lookup import ROOTS, Target, canonical, find, rule, rules
from xtrain.core._internal.migrate.names import bound_names, free_alias, self_assignments
from xtrain.core._internal.migrate.resume import ResumeMoves
from xtrain.core._internal.migrate.rules import Action, Section

__all__ = ["Binding", "Plan", "Planner"]

_BASES = ("xtrain.core.TrainModule", "xtrain.core.DataModule", "xtrain.core.Callback")
_TRAINER_METHODS = ("fit", "validate", "test", "predict")


class Planner(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (QualifiedNameProvider, ParentNodeProvider, PositionProvider)

    def __init__(self) -> None:
        super().__init__()
        self.plan = Plan()
        self._locals: dict[str, Binding] = {}
        self._classes: list[tuple[str | None, set[str]]] = []
        self._known: dict[str, str] = {}        # class name in this file -> the xtrain base it derives from
        self._fabric_names: set[str] = set()
        self._trainer_names: set[str] = {"trainer"}
        self._dropped: set[str] = set()
        self._resume = ResumeMoves()
        self._taken: set[str] = set()

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

    def _local(self, target: Target) -> str:
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
        for small in node.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    name = dotted(alias.name)
                    if name.split(".")[0] not in ROOTS:
                        continue
                    local = alias.asname.name.value if alias.asname else name.split(".")[0]  # type: ignore[union-attr]
                    bound = name if alias.asname else name.split(".")[0]
                    self._bind(Binding(node, local, canonical(bound), False, None, True))
            elif isinstance(small, cst.ImportFrom) and small.module is not None and small.relative == ():
                module = dotted(small.module)
                if module.split(".")[0] not in ROOTS:
                    continue
                if isinstance(small.names, cst.ImportStar):
                    self.note(node, f"`from {module} import *`: import the names you use from xtrain.core instead")
                    continue
                for alias in small.names:
                    name = dotted(alias.name)
                    local = alias.asname.name.value if alias.asname else name  # type: ignore[union-attr]
                    lightning = canonical(f"{module}.{name}")
                    target = find(lightning)
                    self._bind(Binding(node, local, lightning, alias.asname is not None, target, False))
                    if target is None or target.kind == "missing":
                        self.note(node, target.note if target else f"{lightning} has no xtrain equivalent")
                    elif target.kind == "define":
                        self.count(target.label)
        return True

    def _bind(self, binding: Binding) -> None:
        self.plan.bindings.append(binding)
        self._locals[binding.local] = binding
        if binding.target is not None and binding.target.kind == "drop":
            self._dropped.add(binding.local)

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    # -- references ------------------------------------------------------------------------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> bool:
        qname = self._qname(node)
        if qname is None:
            self._attribute_idioms(node)
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
            self.plan.replace[node] = cst.Name(self._local(target))
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
            self.plan.replace[node] = cst.Name(self._local(target))
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
                binding.alias = self._local(target)
                self.plan.replace[node] = cst.Name(binding.alias)
            self.count(target.label)
            self._check_call_arguments(node, target)
        elif target.kind == "missing":
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
        self._plan_call(parent, lightning, target.qualified)
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
            self._plan_call(call, "Trainer", "xtrain.core.Trainer")
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
        for b in self.plan.bindings:
            if b.is_module_import and b.unresolved:
                code = cst.Module([]).code_for_node(b.statement).strip()
                self.note(b.statement, f"`{code}` stays only for the flagged {', '.join(sorted(set(b.unresolved)))}: "
                                       f"delete it once those lines are rewritten")

    def _plan_call(self, call: cst.Call, lightning: str, target: str, edit: ArgEdit | None = None) -> None:
        edit = edit if edit is not None else plan_arguments(list(call.args), lightning=lightning, target=target)
        if edit:
            self.plan.calls[call] = edit
            for label in edit.counts:
                self.count(label)
            for message in edit.notes:
                self.note(call, message)

    # -- idioms ----------------------------------------------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call):
            q = self._qname(node.value.func)
            names = {"lightning.fabric.Fabric": self._fabric_names, "lightning.pytorch.Trainer": self._trainer_names}
            for name in (dotted(t.target) for t in node.targets):
                if name and q in names:
                    names[q or ""].add(name)

    def visit_Param(self, node: cst.Param) -> None:
        if node.annotation is not None and self._qname(node.annotation.annotation) == "lightning.fabric.Fabric":
            self._fabric_names.add(node.name.value)

    def _attribute_idioms(self, node: cst.Attribute) -> None:
        receiver, attr = dotted(node.value), node.attr.value
        parent = self.get_metadata(ParentNodeProvider, node)
        if receiver in self._fabric_names or receiver.endswith(".fabric"):
            r = rule(Section.ENGINE, f"Fabric.{attr}")
            if isinstance(parent, cst.Call) and parent.func is node:
                self._plan_call(parent, "", "", fabric_method_arguments(receiver, attr, list(parent.args)))
            if r is not None and r.action is Action.MISSING:
                self.note(node, f"{receiver}.{attr}: {r.note}")
            elif r is None and not installed.exists(f"xtrain.core.Engine.{attr}") and not attr.startswith("_"):
                self.note(node, f"{receiver}.{attr}: the Engine has no {attr}")
            return
        if attr == "load_from_checkpoint" and receiver[:1].isupper() and not installed.exists(
                "xtrain.core.TrainModule.load_from_checkpoint"):
            self.note(node, "load_from_checkpoint is not in the installed xtrain: upgrade xtrain-core, or build the "
                            "module and load_state_dict(torch.load(path, weights_only=True)[\"state_dict\"])")
            return
        if isinstance(node.value, cst.Attribute) and node.value.attr.value == "state" and self._is_trainer(
                dotted(node.value.value)):
            self._trainer_state(node, receiver, attr)
            return
        if self._is_trainer(receiver):
            if attr in _TRAINER_METHODS and isinstance(parent, cst.Call) and parent.func is node:
                self._plan_call(parent, f"trainer.{attr}", f"xtrain.core.Trainer.{attr}")
                if attr == "fit":
                    self._resume.fit(receiver, parent)
            r = rule(Section.TRAINER_API, attr)
            if r is not None and r.xtrain is not None:
                self.plan.replace[node] = node.with_changes(attr=cst.Name(r.xtrain))
                self.count(f"trainer.{attr} -> trainer.{r.xtrain}")
            elif r is not None:
                self.note(node, f"{receiver}.{attr}: {r.note}")
            return
        if receiver == "self" and self._classes and self._classes[-1][0] == "xtrain.core.TrainModule":
            defined = self._classes[-1][1]
            if attr in ("log", "log_dict") and isinstance(parent, cst.Call) and parent.func is node:
                self._plan_call(parent, "LightningModule.log", "xtrain.core.TrainModule.log")
            r = rule(Section.MODULE_API, attr)
            if r is not None and attr not in defined and not installed.exists(f"xtrain.core.TrainModule.{attr}"):
                self.note(node, f"self.{attr} is not in the installed xtrain's TrainModule" + (
                    f": {r.note}" if r.note else "; upgrade xtrain-core"))

    def _is_trainer(self, receiver: str) -> bool:
        return receiver in self._trainer_names or receiver.endswith(".trainer")

    def _trainer_state(self, node: cst.Attribute, receiver: str, attr: str) -> None:
        """``trainer.state.fn`` is xtrain's ``trainer.state`` (TrainerFn's values are its strings); the rest of
        Lightning's TrainerState has no attribute on a string, so it is flagged with what to use."""
        r = rule(Section.TRAINER_API, f"state.{attr}")
        parent = self.get_metadata(ParentNodeProvider, node)
        if r is not None and r.xtrain is not None and not isinstance(parent, cst.Attribute):
            self.plan.unwrap.add(node)
            self.count(f"trainer.state.{attr} -> trainer.{r.xtrain}")
        elif r is not None and r.xtrain is not None:
            self.note(node, f"{receiver}.{attr}.{getattr(parent, 'attr', cst.Name('value')).value}: {receiver} is already the "
                            f"string; write {receiver}")
        else:
            self.note(node, f"{receiver}.{attr}: " + (r.note if r is not None else "trainer.state is a plain string "
                                                      "(\"fit\", \"validate\", \"test\", \"predict\")"))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        base = None
        for arg in node.bases:
            q = self._qname(arg.value)
            target = find(q) if q else None
            found = target.qualified if target is not None and target.qualified in _BASES else None
            base = base or (found if q else self._known.get(dotted(arg.value)))
        defined = {s.name.value for s in node.body.body if isinstance(s, cst.FunctionDef)}
        for assign in self_assignments(node):
            defined.add(assign)
        self._classes.append((base, defined))
        if base is None:
            return
        self._known[node.name.value] = base
        for statement in node.body.body:
            if isinstance(statement, cst.FunctionDef):
                self._check_hook(statement, base)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._classes.pop()

    def _check_hook(self, method: cst.FunctionDef, base: str) -> None:
        name = method.name.value
        r = rule(Section.MODULE_API, name)
        if r is not None and r.action is Action.MISSING:
            self.note(method, f"{name}: {r.note}")
        elif r is not None and not installed.exists(f"{base}.{name}") and name not in ("load_from_checkpoint",):
            self.note(method, f"xtrain (the installed xtrain-core {installed.core_version()}) does not call {name}: "
                              "move the code to a hook it calls")

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if "lightning_logs" in node.value and self.plan.bindings:
            self.plan.replace[node] = node.with_changes(value=node.value.replace("lightning_logs", "xtrain_logs"))
            self.count(rules(Section.BEHAVIOUR)["lightning_logs/"].lightning + " -> xtrain_logs/")

