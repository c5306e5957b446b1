"""Lightning idioms that need a whole expression or signature: ``TrainerFn`` members, quoted annotations, and the
Lightning 1.x ``dataloader_idx`` of the training batch hooks.

The planner decides with these and records the result in its ``Plan``; nothing here visits the whole module.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from xtrain.core._internal.migrate.decisions import dotted
from xtrain.core._internal.migrate.rules import TRAINER_FN

__all__ = ["BATCH_HOOKS", "Unresolved", "extra_batch_parameter", "rewrite_annotation", "trainer_fn_value"]

# Lightning 2.0 dropped ``dataloader_idx`` from these (a LightningModule's and a Callback's); xtrain does not pass it
BATCH_HOOKS = ("on_train_batch_start", "on_train_batch_end")


class Unresolved(Exception):
    """A Lightning name in a quoted annotation that has no xtrain name to write instead."""


def trainer_fn_value(qualified: str) -> str | None:
    """``"fit"`` for ``lightning.pytorch.trainer.states.TrainerFn.FITTING`` (or its ``.value``): xtrain's
    ``trainer.state`` holds the members' own string values, so a comparison with the string is the same test."""
    parts = qualified.split(".")
    if parts[-1] == "value":
        parts.pop()
    if len(parts) < 3 or parts[0] != "lightning" or parts[-2] != "TrainerFn":
        return None
    return TRAINER_FN.get(parts[-1])


class _Names(cst.CSTTransformer):
    """Replace each whole dotted name in an annotation by what ``resolve`` returns for it (``None``: keep)."""

    def __init__(self, resolve: Callable[[str], str | None]) -> None:
        super().__init__()
        self._lookup = resolve  # not ``resolve``: CSTTransformer has a method of that name

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return False  # the chain is resolved whole in leave_Attribute, never its prefix on its own

    def _replace(self, node: cst.BaseExpression) -> cst.BaseExpression:
        name = dotted(node)
        new = self._lookup(name) if name else None
        return cst.parse_expression(new) if new is not None and new != name else node

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        return self._replace(updated_node)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self._replace(updated_node)


def rewrite_annotation(node: cst.SimpleString, resolve: Callable[[str], str | None]) -> cst.SimpleString | None:
    """``"pl.Trainer"`` as ``"Trainer"``: the quoted annotation ``node`` with every Lightning name replaced by
    ``resolve`` (which raises :class:`Unresolved` for a name xtrain lacks); ``None`` when nothing changes or the text
    is not an expression. Quoted annotations are not names to LibCST, so the import they need is the caller's."""
    text = node.evaluated_value
    if not isinstance(text, str) or node.quote not in ('"', "'") or "\\" in node.value:
        return None
    try:
        expression = cst.parse_expression(text)
    except cst.ParserSyntaxError:
        return None
    rewritten = expression.visit(_Names(resolve))
    if not isinstance(rewritten, cst.BaseExpression):
        return None
    new = cst.Module([]).code_for_node(rewritten)
    if new == text or node.quote in new:
        return None
    return node.with_changes(value=f"{node.prefix}{node.quote}{new}{node.quote}")


def extra_batch_parameter(method: cst.FunctionDef, takes: int) -> cst.Param | None:
    """The Lightning 1.x ``dataloader_idx`` of a training batch hook that xtrain calls with ``takes`` positional
    arguments (``self`` included): the one required parameter past them, which then gets the default ``0``, the value
    Lightning 1.x always passed there; ``None`` when the signature already fits (or is not that simple)."""
    params = [*method.params.posonly_params, *method.params.params]
    if isinstance(method.params.star_arg, cst.Param) or len(params) != takes + 1:
        return None
    extra = params[-1]
    return extra if extra.default is None else None
