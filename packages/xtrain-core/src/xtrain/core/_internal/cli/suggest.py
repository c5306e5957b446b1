"""The closest valid name for an option or config key the parser refused, in flags and YAML alike.

Options are never abbreviated (``allow_abbrev=False``): with abbreviations, ``--trainer.max_epoch`` silently meant
``--trainer.max_epochs``, so a typo of a future option would quietly mean another one. A refused name instead gets
the nearest valid names, found with :mod:`difflib` among the parser's keys and options or, for a ``class_path``'s
``init_args``, among the parameters of that class; a name that begins exactly one valid name (``learn`` for
``learning_rate``) gets that one first, however short it is. Refused values (a wrong type, a misspelt choice or class)
get their hints from :mod:`~xtrain.core._internal.cli.suggest_values`.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import re
from typing import Any

__all__ = ["closest_names", "match"]

_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.*)", re.DOTALL)
_NOT_ACCEPTED = re.compile(r"does not accept (?:option|key)s? '([^']+)'")
_NOT_EXPECTED = re.compile(r"[Kk]ey '([^']+)' is not expected")
_INIT_ARG = re.compile(r"class_path '([^']+)':\s*Option '([^']+)' is not accepted")
_OUTER_KEY = re.compile(r'Parser key "([^"]+)"')
_GIVEN_DICT = re.compile(r"^\s*Given value: (\{.*\})\s*$", re.MULTILINE)
_CLASS_KEYS = ("class_path", "init_args", "dict_kwargs", "__path__")


def _parser_keys(parser: Any) -> list[str]:
    keys = [k for k in parser.get_defaults().keys() if k != "config"]  # noqa: SIM118 - a jsonargparse Namespace
    groups = {k.rsplit(".", 1)[0] for k in keys if "." in k}
    return sorted({*keys, *groups})


def _parser_options(parser: Any) -> list[str]:
    """Every long option without its dashes: the keys, and the options that are no keys (``config``,
    ``print_config``, ``help``)."""
    flags = {o[2:] for o in getattr(parser, "_option_string_actions", {}) if o.startswith("--")}
    return sorted({*_parser_keys(parser), *flags})


def match(name: str, candidates: list[str]) -> list[str]:
    """At most two candidates closest to ``name``: the one it spells in other case or begins (if it begins only
    one), then difflib's."""
    cased = [c for c in candidates if c.lower() == name.lower() and c != name]
    prefixed = [c for c in candidates if c.startswith(name) and c != name]
    close = difflib.get_close_matches(name, candidates, n=2, cutoff=0.6)
    first = [*cased, *(prefixed if len(prefixed) == 1 else [])]
    return list(dict.fromkeys([*first, *close]))[:2]


def _init_args(class_path: str) -> list[str]:
    from xtrain.core._internal.cli.instantiate import class_from_path

    try:
        params = inspect.signature(class_from_path(class_path)).parameters.values()
    except (ImportError, AttributeError, TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _misplaced_init_args(message: str) -> list[str]:
    """``model: {class_path: a.B, lr: 0.1}``: jsonargparse blames the base class for ``class_path``; name the keys
    that belong under ``init_args`` instead."""
    given = _GIVEN_DICT.search(message)
    outer = _OUTER_KEY.search(message)
    try:
        value = ast.literal_eval(given.group(1)) if given else None
    except (ValueError, SyntaxError):
        value = None
    if not isinstance(value, dict) or not isinstance(value.get("class_path"), str) or outer is None:
        return []
    key, class_path = outer.group(1), value["class_path"]
    extra = {k: v for k, v in value.items() if k not in _CLASS_KEYS}
    if not extra:
        return []
    valid = _init_args(class_path)
    hints = []
    for arg, val in extra.items():
        close = [] if arg in valid or not valid else match(arg, valid)
        what = (f"is not an argument of {class_path} (did you mean {close[0]!r}?)" if close
                else f"is an argument of {class_path}" if arg in valid else "is not class_path")
        name = close[0] if close else arg
        hints.append(f"{key}.{arg} {what}; init args go under init_args, not beside class_path. Fix: {key}: "
                     f"{{class_path: {class_path}, init_args: {{{name}: {val!r}}}}} in YAML, or --{key}.{name} {val} "
                     "on the command line.")
    return hints


def closest_names(message: str, parser: Any) -> list[str]:
    """Lines naming the closest valid spelling of each name that ``message`` (the parser's error) refuses, or the
    fix of each value it refuses."""
    from xtrain.core._internal.cli.suggest_values import value_hints

    hints: list[str] = []
    found = _UNRECOGNIZED.search(message)
    if found:
        options = _parser_options(parser)
        for token in found.group(1).split():
            if token.startswith("--"):
                name = token[2:].split("=", 1)[0]
                close = match(name, options)
                if close:
                    hints.append(f"--{name} is not an option (options are never abbreviated); did you mean "
                                 + " or ".join(f"--{c}" for c in close) + "?")
    for pattern in (_NOT_ACCEPTED, _NOT_EXPECTED):
        for name in pattern.findall(message):
            keys = _parser_keys(parser)
            group = name.rsplit(".", 1)[0] + "." if "." in name else ""
            siblings = [k[len(group):] for k in keys if k.startswith(group) and "." not in k[len(group):]]
            # trainer.max_epoch: the closest key of its own group (the group itself is no answer)
            close = [group + c for c in match(name[len(group):], siblings)] if group and siblings else \
                match(name, keys)
            if close:
                hints.append(f"{name!r} is not a valid key; did you mean " + " or ".join(map(repr, close)) + "?")
            elif siblings:
                hints.append(f"{name!r} is not a valid key; the keys {'of ' + group[:-1] + ' ' if group else ''}"
                             f"are {_listing(siblings)}.")
    for class_path, name in _INIT_ARG.findall(message):
        if name == "class_path":
            hints += _misplaced_init_args(message)
            continue
        valid = _init_args(class_path)
        close = match(name, valid)
        if close:
            hints.append(f"{class_path} takes no argument {name!r}; did you mean " + " or ".join(map(repr, close))
                         + "?")
        elif valid:
            hints.append(f"{class_path} takes no argument {name!r}; its arguments are {_listing(valid)}.")
    return hints + value_hints(message)


def _listing(names: list[str], *, most: int = 25) -> str:
    shown = ", ".join(map(repr, names[:most]))
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
