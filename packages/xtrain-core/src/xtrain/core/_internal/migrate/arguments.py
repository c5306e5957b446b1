"""Trainer and Fabric keyword arguments: renamed, dropped, translated (``gpus=2``) or flagged, by the rule table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst

from xtrain.core._internal.migrate import installed
from xtrain.core._internal.migrate.argvalues import DEVICE_COUNTS, device_move, flag_note, removable
from xtrain.core._internal.migrate.lookup import rule
from xtrain.core._internal.migrate.rules import Action, Section

__all__ = ["ArgEdit", "apply_arguments", "plan_arguments", "precision_value"]


@dataclass
class ArgEdit:
    """What happens to a call's arguments: ``rename[i]``, ``values[i]``, ``drop``, ``added`` keyword arguments."""

    rename: dict[int, str] = field(default_factory=dict)
    values: dict[int, cst.BaseExpression] = field(default_factory=dict)
    drop: set[int] = field(default_factory=set)
    added: list[tuple[str, cst.BaseExpression]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.rename or self.values or self.drop or self.added or self.notes)


def _literal(node: cst.BaseExpression) -> object:
    if isinstance(node, cst.Integer):
        return int(node.value)
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    if isinstance(node, cst.Name) and node.value in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[node.value]
    return ...


def _value(node: cst.BaseExpression) -> object:
    """A literal's value, else the code of a dotted name (``signal.SIGUSR1``), for the defaults of ``argvalues``."""
    value = _literal(node)
    return cst.Module([]).code_for_node(node) if value is ... and isinstance(node, (cst.Name, cst.Attribute)) else value


def precision_value(node: cst.BaseExpression) -> str | None:
    """The canonical precision name for a legacy literal (``16`` -> ``"16-mixed"``), else ``None``."""
    value = _literal(node)
    if value is ... or value is None or isinstance(value, bool):
        return None
    r = rule(Section.PRECISION, str(value))
    return r.xtrain if r is not None else None


_STRATEGY_AS_ACCELERATOR = ("ddp", "ddp_spawn", "dp", "ddp2", "ddp_cpu", "horovod")


def _string(value: str) -> cst.SimpleString:
    return cst.SimpleString(f'"{value}"')


def positional_note(args: list[cst.Arg], *, target: str) -> str | None:
    """What to say when a call passes ``target`` more arguments by position than the installed xtrain takes (a
    Lightning signature whose later parameters xtrain takes by keyword only)."""
    positional = [a for a in args if a.keyword is None and not a.star]
    takes = installed.positional_parameters(target)
    if takes is None or len(positional) <= len(takes):
        return None
    return (f"{target.rpartition('.')[2]}(...) takes {len(takes)} argument(s) by position in the installed xtrain "
            f"({', '.join(takes) or 'none'}) and this call passes {len(positional)}: pass the others by keyword")


def plan_arguments(args: list[cst.Arg], *, lightning: str, target: str) -> ArgEdit:
    """Plan the rewrite of the keyword arguments of a call to the Lightning callable ``lightning`` (its last name),
    ``target`` being the xtrain callable they will be passed to."""
    edit = ArgEdit()
    given = {a.keyword.value for a in args if a.keyword is not None
             and not (a.keyword.value == "accelerator" and _literal(a.value) in _STRATEGY_AS_ACCELERATOR)}
    for i, arg in enumerate(args):
        if arg.keyword is None:
            continue
        key = arg.keyword.value
        r = rule(Section.TRAINER_ARG, key) if lightning == "Trainer" else rule(
            Section.ENGINE if lightning == "Fabric" else Section.ARGUMENT, f"{lightning}({key}=)")
        label = f"{lightning}({key}=)"
        if r is None or r.action is Action.SAME:
            if not installed.accepts(target, key):
                shown = lightning if lightning.startswith("trainer.") else target.rpartition('.')[2]
                edit.notes.append(f"{shown}({key}=) is not accepted by xtrain (the installed xtrain-core "
                                  f"{installed.core_version()}): remove it")
            continue
        if r.action is Action.DROP:
            edit.drop.add(i)
            edit.counts.append(f"{label} removed ({r.note})")
        elif r.action is Action.MISSING:
            edit.notes.append(f"{key}=: {r.note}")
        elif r.action is Action.RENAME and r.xtrain is not None and r.xtrain in given:
            edit.notes.append(f"{key}= and {r.xtrain}= are both given: keep {r.xtrain}= and remove {key}=")
        elif r.action is Action.RENAME and r.xtrain is not None:
            edit.rename[i] = r.xtrain
            edit.counts.append(f"{label} -> {r.xtrain}=")
        elif r.action is Action.TRANSLATE and (gone := removable(label, _value(arg.value))) is not None:
            if gone:
                edit.drop.add(i)
                edit.counts.append(f"{label} removed (Lightning's default: xtrain does this itself)")
            else:
                edit.notes.append(flag_note(label, f"{key}={cst.Module([]).code_for_node(arg.value)}"))
        elif r.action is Action.TRANSLATE:
            _translate(edit, i, key, arg.value, given)
    return edit


def _devices(edit: ArgEdit, i: int, key: str, value: cst.BaseExpression, given: set[str]) -> None:
    """``gpus=N`` / ``tpu_cores=N`` / ``num_processes=N`` (Lightning 1.x) as ``accelerator=``, ``devices=``, as
    :func:`~xtrain.core._internal.migrate.argvalues.device_move` decides (0 or None: the CPU); a string without a
    comma was a count."""
    literal = _literal(value)
    accelerator = DEVICE_COUNTS[key]
    move = device_move(key, literal, given)
    if move is None:
        edit.notes.append(f"{key}= and devices= are both given: keep devices= and remove {key}=")
        return
    if not move.devices:
        if move.accelerator is not None:
            edit.rename[i] = "accelerator"
            edit.values[i] = _string(move.accelerator)
            edit.counts.append(f"Trainer({key}={literal!r}) -> accelerator=\"cpu\" (Lightning 1.x ran on the CPU)")
        else:
            edit.drop.add(i)
            edit.counts.append(f"{key}={literal!r} removed")
        return
    edit.rename[i] = "devices"
    if isinstance(literal, str) and "," not in literal and literal.strip().lstrip("-").isdigit():
        edit.values[i] = cst.parse_expression(str(int(literal)))
    if move.accelerator is not None:
        edit.added.append(("accelerator", _string(move.accelerator)))
    edit.counts.append(f"Trainer({key}=N) -> accelerator=\"{accelerator}\", devices=N")
    if literal is ... and accelerator != "cpu" and not isinstance(value, (cst.List, cst.Tuple, cst.UnaryOperation)):
        code = cst.Module([]).code_for_node(value)
        edit.notes.append(f"{key}={code} became devices={code} with accelerator=\"{accelerator}\"; Lightning 1.x ran "
                          f"on the CPU when it was 0 or None: if it can be, write accelerator=\"{accelerator}\" if "
                          f"{code} else \"cpu\", devices={code} or 1")


def _translate(edit: ArgEdit, i: int, key: str, value: cst.BaseExpression, given: set[str]) -> None:
    literal = _literal(value)
    if key == "precision":
        canonical = precision_value(value)
        if canonical is not None:
            edit.values[i] = _string(canonical)
            edit.counts.append(f"precision={literal!r} -> \"{canonical}\"")
    elif key == "accelerator" and literal in _STRATEGY_AS_ACCELERATOR:
        edit.rename[i] = "strategy"
        if literal == "ddp_cpu":
            edit.values[i] = _string("ddp")
            if "accelerator" not in given:
                edit.added.append(("accelerator", _string("cpu")))
        edit.counts.append(f"Trainer(accelerator={literal!r}) -> strategy=")
    elif key in DEVICE_COUNTS:
        _devices(edit, i, key, value, given)
    elif key == "weights_summary":
        edit.drop.add(i)
        if literal is None and "enable_model_summary" not in given:
            edit.added.append(("enable_model_summary", cst.Name("False")))
        edit.counts.append("Trainer(weights_summary=) -> enable_model_summary=")
    elif key == "progress_bar_refresh_rate":
        _refresh_rate(edit, i, value, given)


_SLOWER_BAR = "for a slower bar pass callbacks=[ProgressBar(refresh_interval=SECONDS)] (xtrain.core.callbacks)"


def _refresh_rate(edit: ArgEdit, i: int, value: cst.BaseExpression, given: set[str]) -> None:
    """``progress_bar_refresh_rate=``: 0 switches the bar off; any other rate has no batch-based equivalent, since
    xtrain's bar refreshes by time, so it goes (saying how to slow the bar); an expression may be 0 at run time."""
    literal = _literal(value)
    edit.drop.add(i)
    if literal == 0:
        if "enable_progress_bar" not in given:
            edit.added.append(("enable_progress_bar", cst.Name("False")))
        edit.counts.append("Trainer(progress_bar_refresh_rate=0) -> enable_progress_bar=False")
    elif literal is ...:
        code = cst.Module([]).code_for_node(value)
        edit.notes.append(f"progress_bar_refresh_rate={code} was removed: if it can be 0, pass "
                          f"enable_progress_bar=({code}) != 0; {_SLOWER_BAR}")
    else:
        edit.counts.append(f"Trainer(progress_bar_refresh_rate=N) removed: the bar refreshes by time; {_SLOWER_BAR}")


def apply_arguments(args: Sequence[cst.Arg], edit: ArgEdit,
                    opening: cst.BaseParenthesizableWhitespace | None = None) -> list[cst.Arg]:
    """``args`` (the updated arguments of the call that ``edit`` was planned on) after the edit.

    Kept arguments keep their own comma and whitespace, so a call written one argument per line stays that way: an
    argument that moves off the end, or an added one, takes the separator between the original arguments (or, for a
    single one, the whitespace after the opening parenthesis, ``opening``); the last one takes the original end.
    """
    kept: list[tuple[cst.Arg, bool]] = []   # (argument, whether it keeps its own separator)
    for i, arg in enumerate(args):
        if i in edit.drop:
            continue
        if i in edit.rename:
            arg = arg.with_changes(keyword=cst.Name(edit.rename[i]), equal=arg.equal if arg.keyword is not None else
                                   cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        if i in edit.values:
            arg = arg.with_changes(value=edit.values[i])
        kept.append((arg, i < len(args) - 1 and isinstance(arg.comma, cst.Comma)))
    for key, value in edit.added:
        kept.append((cst.Arg(value=value, keyword=cst.Name(key),
                             equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))), False))
    if not kept:
        return []
    separator = next((a.comma for a in args[:-1] if isinstance(a.comma, cst.Comma)), None)
    if separator is None:
        lines = isinstance(opening, cst.ParenthesizedWhitespace)
        separator = cst.Comma(whitespace_after=opening if lines and opening is not None
                              else cst.SimpleWhitespace(" "))
    out: list[cst.Arg] = []
    for arg, own in kept[:-1]:
        out.append(arg if own else arg.with_changes(comma=separator, whitespace_after_arg=cst.SimpleWhitespace("")))
    last, end = kept[-1][0], args[-1] if args else None
    out.append(last if end is None else last.with_changes(comma=end.comma, whitespace_after_arg=end.whitespace_after_arg))
    return out
