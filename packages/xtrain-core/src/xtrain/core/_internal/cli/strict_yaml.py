"""YAML for the command line and its config files, refusing a key written twice in one mapping and a config that
expands to too many values (YAML aliases of aliases: a few hundred bytes that jsonargparse would copy out into
gigabytes).

jsonargparse (as LightningCLI) keeps the second of two equal keys; xtrain's parsers refuse the file naming both
lines (:mod:`~xtrain.core._internal.yaml_keys`), and otherwise read values exactly as jsonargparse's own YAML mode.
Imported only by the CLI (PyYAML and jsonargparse come with the ``cli`` extra).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import yaml
from jsonargparse import get_loader, set_loader

from xtrain.core._internal.bounded import bounds_problem
from xtrain.core._internal.yaml_keys import repeated_key

__all__ = ["PARSER_MODE", "enforce_import_policy", "expansion_problem", "input_problem"]

PARSER_MODE = "xtrain_yaml"  # for parser_mode=: registered with jsonargparse when this module is imported


def _load(stream: str) -> Any:
    problem = _read(stream, lambda text: repeated_key(text, yaml.SafeLoader))  # keys as written: no resolver
    if problem is not None:  # a YAMLError: jsonargparse reports it as a problem in the config
        raise yaml.YAMLError(f"{problem}. Fix: delete the one you do not mean.")
    loaded = _read(stream, get_loader("yaml"))
    problem = bounds_problem(loaded)  # before jsonargparse copies and checks it: an alias bomb expands there
    if problem is not None:
        raise yaml.YAMLError(f"The config {problem}. {_FIX}")
    return loaded


_FIX = ("Fix: write each value out once (a few YAML anchors are fine; one list aliased many times is not) and keep "
        "large data in a file whose path the config gives.")


def _read(text: str, load: Any) -> Any:
    """``load(text)``, with the errors of a hostile text (nesting past the interpreter's stack, an integer of
    thousands of digits) as the YAMLError jsonargparse reports, not a traceback."""
    try:
        return load(text)
    except RecursionError:
        raise yaml.YAMLError("The config is nested too deeply to read. Fix: flatten it.") from None
    except ValueError as err:
        raise yaml.YAMLError(f"The config holds a value that cannot be read ({err}).") from None


def expansion_problem(values: Iterable[str]) -> str | None:
    """What makes one of ``values`` (command-line arguments, ``XTRAIN_*`` variables) too large once its YAML
    aliases are expanded: jsonargparse reads a typed value with its own loader, past :func:`_load`'s check."""
    for value in values:
        if "*" not in value and "[" * 50 not in value and "{" * 50 not in value:
            continue  # without an alias or deep nesting, a value is as large as its text
        try:
            loaded = _read(value, yaml.safe_load)
        except yaml.YAMLError as err:
            if "nested too deeply" in str(err):
                return f"a value ({value[:40]!r}...) is nested too deeply to read. Fix: flatten it."
            continue  # not YAML: jsonargparse says what it is
        problem = bounds_problem(loaded)
        if problem is not None:
            return f"the value {value[:40]!r}... {problem}. {_FIX}"
    return None


def input_problem(argv: list[str], env_prefixes: tuple[str, ...] = ("XTRAIN_",)) -> str | None:
    """Prepare jsonargparse for the command's input and check what it will read past :func:`_load`: the import
    policy is enforced, then ``argv`` and the ``XTRAIN_*`` variables are checked (:func:`expansion_problem`).
    Both the ``xtrain`` command and ``XtrainCLI`` call it before they parse; ``XtrainCLI`` adds its prefix
    (``PL_``, read with ``default_env``) to ``env_prefixes``."""
    enforce_import_policy()
    return expansion_problem([*argv, *(value for key, value in os.environ.items() if key.startswith(env_prefixes))])


def enforce_import_policy() -> None:
    """Refuse values that name dangerous import paths (``os``, ``subprocess``, ``pickle``, every ``builtins``
    function...), as jsonargparse will from its version 5; until then it only warns. A ``Callable`` parameter
    takes any function by its dotted path (``lr_lambda: builtins.print``), which the receiving code then calls."""
    from jsonargparse import set_parsing_settings

    try:
        set_parsing_settings(import_path_denylist=["builtins"])
    except TypeError:  # a jsonargparse before import-path policies: it has none to enforce
        pass


set_loader(PARSER_MODE, _load, exceptions=(yaml.YAMLError,))
