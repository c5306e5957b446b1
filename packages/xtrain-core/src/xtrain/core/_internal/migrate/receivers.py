"""Attributes of a receiver that holds Lightning's Trainer, Fabric or LightningModule: ``trainer.x``, ``fabric.x``,
``self.x``.

These are read by the name they are reached through, not by import (``trainer`` is a variable, not a Lightning
name), so they are planned apart from the references the imports bind: the planner hands each attribute it could not
resolve by import here, with its parent node, and gets the decisions back through its :class:`Recorder`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import libcst as cst

from xtrain.core._internal.migrate import installed
from xtrain.core._internal.migrate.decisions import Recorder, dotted
from xtrain.core._internal.migrate.fabric_args import fabric_method_arguments
from xtrain.core._internal.migrate.lookup import rule
from xtrain.core._internal.migrate.resume import ResumeMoves
from xtrain.core._internal.migrate.rules import Action, Section

__all__ = ["Receivers", "plan_receiver_attribute"]

_TRAINER_METHODS = ("fit", "validate", "test", "predict")
_FABRIC = "lightning.fabric.Fabric"
_TRAINER = "lightning.pytorch.Trainer"


@dataclass
class Receivers:
    """The names in a file that hold a Fabric or a Trainer: assigned one, or (Fabric) a parameter annotated so.

    ``trainer`` is always taken for a Trainer, and any ``x.trainer`` / ``x.fabric`` too (a module's or callback's).
    """

    fabric: set[str] = field(default_factory=set)
    trainer: set[str] = field(default_factory=lambda: {"trainer"})

    def assigned(self, constructed: str | None, targets: Iterable[str]) -> None:
        """Record ``targets`` (dotted names) assigned a call of the Lightning callable ``constructed``."""
        names = {_FABRIC: self.fabric, _TRAINER: self.trainer}.get(constructed or "")
        if names is not None:
            names.update(name for name in targets if name)

    def annotated(self, annotation: str | None, name: str) -> None:
        """Record the parameter ``name`` annotated with the Lightning name ``annotation``."""
        if annotation == _FABRIC:
            self.fabric.add(name)

    def is_trainer(self, receiver: str) -> bool:
        return receiver in self.trainer or receiver.endswith(".trainer")

    def is_fabric(self, receiver: str) -> bool:
        return receiver in self.fabric or receiver.endswith(".fabric")


def plan_receiver_attribute(out: Recorder, node: cst.Attribute, parent: cst.CSTNode, receivers: Receivers,
                            resume: ResumeMoves, module_defines: set[str] | None) -> None:
    """Plan ``node`` (whose parent is ``parent``) if its receiver is a Fabric, a Trainer (or its ``.state`` or
    ``.strategy``), or ``self`` in a TrainModule subclass, whose own methods and attributes are ``module_defines``
    (``None`` outside such a class)."""
    receiver, attr = dotted(node.value), node.attr.value
    call = parent if isinstance(parent, cst.Call) and parent.func is node else None
    if receivers.is_fabric(receiver):
        r = rule(Section.ENGINE, f"Fabric.{attr}")
        if call is not None:
            out.plan_call(call, "", "", fabric_method_arguments(receiver, attr, list(call.args)))
        if r is not None and r.action is Action.MISSING:
            out.note(node, f"{receiver}.{attr}: {r.note}")
        elif r is None and not installed.exists(f"xtrain.core.Engine.{attr}") and not attr.startswith("_"):
            out.note(node, f"{receiver}.{attr}: the Engine has no {attr}")
        return
    if attr == "load_from_checkpoint" and receiver[:1].isupper() and not installed.exists(
            "xtrain.core.TrainModule.load_from_checkpoint"):
        out.note(node, "load_from_checkpoint is not in the installed xtrain: upgrade xtrain-core, or build the "
                       "module and load_state_dict(torch.load(path, weights_only=True)[\"state_dict\"])")
        return
    value = node.value
    if isinstance(value, cst.Attribute) and value.attr.value in ("state", "strategy") and receivers.is_trainer(
            dotted(value.value)):
        if value.attr.value == "state":
            _trainer_state(out, node, parent, receiver, attr)
        else:
            _strategy_attribute(out, node, attr)
        return
    if receivers.is_trainer(receiver):
        if attr in _TRAINER_METHODS and call is not None:
            out.plan_call(call, f"trainer.{attr}", f"xtrain.core.Trainer.{attr}")
            if attr == "fit":
                resume.fit(receiver, call)
        r = rule(Section.TRAINER_API, attr)
        if r is not None and r.xtrain is not None:
            out.plan.replace[node] = node.with_changes(attr=cst.Name(r.xtrain))
            out.count(f"trainer.{attr} -> trainer.{r.xtrain}")
        elif r is not None:
            out.note(node, f"{receiver}.{attr}: {r.note}")
        return
    if receiver == "self" and module_defines is not None:
        if attr in ("log", "log_dict") and call is not None:
            out.plan_call(call, "LightningModule.log", "xtrain.core.TrainModule.log")
        r = rule(Section.MODULE_API, attr)
        if r is not None and attr not in module_defines and not installed.exists(f"xtrain.core.TrainModule.{attr}"):
            out.note(node, f"self.{attr} is not in the installed xtrain's TrainModule" + (
                f": {r.note}" if r.note else "; upgrade xtrain-core"))


def _strategy_attribute(out: Recorder, node: cst.Attribute, attr: str) -> None:
    """``trainer.strategy.x``: renamed where the rule table and the installed Strategy have the new name."""
    r = rule(Section.TRAINER_API, f"strategy.{attr}")
    new = r.xtrain.rpartition(".")[2] if r is not None and r.xtrain is not None else None
    if new is not None and installed.exists(f"xtrain.core.Strategy.{new}"):
        out.plan.replace[node] = node.with_changes(attr=cst.Name(new))
        out.count(f"trainer.strategy.{attr} -> trainer.strategy.{new}")


def _trainer_state(out: Recorder, node: cst.Attribute, parent: cst.CSTNode, receiver: str, attr: str) -> None:
    """``trainer.state.fn`` is xtrain's ``trainer.state`` (TrainerFn's values are its strings); the rest of
    Lightning's TrainerState has no attribute on a string, so it is flagged with what to use."""
    r = rule(Section.TRAINER_API, f"state.{attr}")
    if r is not None and r.xtrain is not None and not isinstance(parent, cst.Attribute):
        out.plan.unwrap.add(node)
        out.count(f"trainer.state.{attr} -> trainer.{r.xtrain}")
    elif r is not None and r.xtrain is not None:
        out.note(node, f"{receiver}.{attr}.{getattr(parent, 'attr', cst.Name('value')).value}: {receiver} is already "
                       f"the string; write {receiver}")
    else:
        out.note(node, f"{receiver}.{attr}: " + (r.note if r is not None else "trainer.state is a plain string "
                                                 "(\"fit\", \"validate\", \"test\", \"predict\")"))
