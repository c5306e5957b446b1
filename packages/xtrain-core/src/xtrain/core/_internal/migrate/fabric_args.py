"""Arguments of Fabric's methods that the Engine's methods lack, by the ``Fabric.<method>(<argument>=)`` rows of the
rule table: renamed, removed where removing them is exact (the value written is the Engine's behaviour), else left
with a note, so a converted call never fails with a TypeError unannounced."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

import libcst as cst

from xtrain.core._internal.migrate import installed
from xtrain.core._internal.migrate.arguments import ArgEdit
from xtrain.core._internal.migrate.lookup import rule
from xtrain.core._internal.migrate.rules import Action, Section

__all__ = ["fabric_method_arguments"]

# Fabric's positional parameters of a method, and how many of them the Engine's method takes by position: the
# arguments given past those become keywords (then renamed, removed or flagged like keywords).
_POSITIONAL: dict[str, tuple[tuple[str, ...], int]] = {
    "setup_module": (("module", "move_to_device", "_reapply_compile"), 1),
    "clip_gradients": (("module", "optimizer", "clip_val", "max_norm", "norm_type", "error_if_nonfinite"), 2),
    "all_gather": (("data", "group", "sync_grads"), 1),
    "all_reduce": (("data", "group", "reduce_op"), 1),
    "save": (("path", "state", "filter"), 2),
    "load": (("path", "state", "strict"), 2),
    "rank_zero_first": (("local",), 0),
    "seed_everything": (("seed", "workers", "verbose"), 1),
}

# When removing a "rewritten" argument is exact: its literal value (``...`` when not a literal), the names given.
_EXACT: dict[str, Callable[[object, set[str]], bool]] = {
    "move_to_device": lambda v, given: v is True,
    "scheduler": lambda v, given: v is None,
    "norm_type": lambda v, given: (type(v) in (int, float) and v == 2) or ("clip_val" in given
                                                                           and "max_norm" not in given),
    "error_if_nonfinite": lambda v, given: v is False,
    "group": lambda v, given: v is None,
    "sync_grads": lambda v, given: v is False,
    "filter": lambda v, given: v is None,
    "weights_only": lambda v, given: v is None or v is True,
    "workers": lambda v, given: v is True,
    "verbose": lambda v, given: v is False,
}


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _literal(node: cst.BaseExpression) -> object:
    try:
        return ast.literal_eval(_code(node))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return ...


def _engine_takes(method: str, key: str) -> bool:
    """Whether the installed Engine's method names the parameter ``key`` itself (then the argument stays)."""
    return installed.names_parameter(f"xtrain.core.Engine.{method}", key)


def _flag(note: str) -> str:
    """The part of a row's note that says why the argument stays and what to do."""
    return re.split(r"flagged[^:]*: ", note, maxsplit=1)[-1]


def fabric_method_arguments(receiver: str, method: str, args: list[cst.Arg]) -> ArgEdit:
    """Plan the arguments of ``receiver.method(*args)``, ``receiver`` holding a Fabric (an Engine once migrated)."""
    edit = ArgEdit()
    star = next((i for i, a in enumerate(args) if a.star), len(args))
    names, keep = _POSITIONAL.get(method, ((), len(args)))
    named: dict[int, str] = {i: a.keyword.value for i, a in enumerate(args) if a.keyword is not None}
    moved = {i: names[i] for i in range(keep, min(star, len(names))) if args[i].keyword is None}
    named.update(moved)
    given = set(named.values())
    if method == "backward":
        extra = [a for i, a in enumerate(args) if (0 < i < star and a.keyword is None)
                 or (a.keyword is not None and a.keyword.value not in ("tensor", "model"))]
        r = rule(Section.ENGINE, "Fabric.backward(*args, **kwargs)")
        if extra and r is not None:
            edit.notes.append(f"{receiver}.backward({', '.join(_code(a).rstrip(', ') for a in extra)}): {r.note}")
    positional_seed = bool(args) and args[0].keyword is None and not args[0].star
    if method == "seed_everything" and star == len(args) and not positional_seed and "seed" not in given:
        r = rule(Section.ENGINE, "Fabric.seed_everything(seed=)")
        if r is not None:
            edit.notes.append(f"{receiver}.seed_everything(): {_flag(r.note)}")
    for i, key in sorted(named.items()):
        if i in moved:
            edit.rename[i] = key
        r = rule(Section.ENGINE, f"Fabric.{method}({key}=)")
        if r is None or r.action is Action.SAME or (r.action is not Action.RENAME and _engine_takes(method, key)):
            continue
        value = _literal(args[i].value)
        shown = f"{receiver}.{method}({key}={_code(args[i].value)})"
        if r.action is Action.RENAME and r.xtrain is not None and r.xtrain in given:
            edit.notes.append(f"{shown}: {r.xtrain}= is given too: keep {r.xtrain}= and remove {key}=")
        elif r.action is Action.RENAME and r.xtrain is not None:
            edit.rename[i] = r.xtrain
            edit.counts.append(f"Fabric.{method}({key}=) -> {r.xtrain}=")
        elif r.action is Action.DROP or (r.action is Action.TRANSLATE and key in _EXACT
                                         and _EXACT[key](value, given)):
            edit.drop.add(i)
            edit.counts.append(f"Fabric.{method}({key}=) removed (the Engine's behaviour)")
        elif r.action is Action.MISSING:
            edit.notes.append(f"{shown}: {r.note}")
        elif r.action is Action.TRANSLATE and key in _EXACT:
            edit.notes.append(f"{shown}: {_flag(r.note)}")
    edit.counts += [f"Fabric.{method}({key}) given by position -> {edit.rename[i]}=" for i, key in moved.items()
                    if i not in edit.drop]
    return edit
