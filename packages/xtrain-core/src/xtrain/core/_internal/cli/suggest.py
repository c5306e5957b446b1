"""The closest valid name for an option or config key the parser refused, in flags and YAML alike.

Options are never abbreviated (``allow_abbrev=False``): with abbreviations, ``--trainer.max_epoch`` silently meant
``--trainer.max_epochs``, so a typo of a future option would quietly mean another one. A refused name instead gets
the nearest valid names, found with :mod:`difflib` among the parser's keys or, for a ``class_path``'s ``init_args``,
among the parameters of that class.
"""

from __future__ import annotations

import difflib
import inspect
import re
from typing import Any

__all__ = ["closest_names"]

_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.*)", re.DOTALL)
_NOT_ACCEPTED = re.compile(r"does not accept (?:option|key)s? '([^']+)'")
_NOT_EXPECTED = re.compile(r"[Kk]ey '([^']+)' is not expected")
_INIT_ARG = re.compile(r"class_path '([^']+)':\s*Option '([^']+)' is not accepted")


def _parser_keys(parser: Any) -> list[str]:
    keys = [k for k in parser.get_defaults().keys() if k != "config"]  # noqa: SIM118 - a jsonargparse Namespace
    groups = {k.rsplit(".", 1)[0] for k in keys if "." in k}
    return sorted({*keys, *groups})


def _match(name: str, candidates: list[str]) -> list[str]:
    return difflib.get_close_matches(name, candidates, n=2, cutoff=0.6)


def _init_args(class_path: str) -> list[str]:
    from xtrain.core._internal.cli.instantiate import class_from_path

    try:
        params = inspect.signature(class_from_path(class_path)).parameters.values()
    except (ImportError, AttributeError, TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def closest_names(message: str, parser: Any) -> list[str]:
    """Lines naming the closest valid spelling of each name that ``message`` (the parser's error) refuses."""
    hints: list[str] = []
    found = _UNRECOGNIZED.search(message)
    if found:
        keys = _parser_keys(parser)
        for token in found.group(1).split():
            if token.startswith("--"):
                name = token[2:].split("=", 1)[0]
                close = _match(name, keys)
                if close:
                    hints.append(f"--{name} is not an option (options are never abbreviated); did you mean "
                                 + " or ".join(f"--{c}" for c in close) + "?")
    for pattern in (_NOT_ACCEPTED, _NOT_EXPECTED):
        for name in pattern.findall(message):
            close = _match(name, _parser_keys(parser))
            if close:
                hints.append(f"{name!r} is not a valid key; did you mean " + " or ".join(map(repr, close)) + "?")
    for class_path, name in _INIT_ARG.findall(message):
        close = _match(name, _init_args(class_path))
        if close:
            hints.append(f"{class_path} takes no argument {name!r}; did you mean " + " or ".join(map(repr, close))
                         + "?")
    return hints
