"""The fix for a value the parser refused: a wrong type, a misspelt choice, a misspelt class name.

jsonargparse's own message for these is a dump of the union it tried (``Does not validate against any of the Union
subtypes ...``) that names the key and the value but not what to write instead. These lines follow it, as the
closest-name lines of :mod:`~xtrain.core._internal.cli.suggest` do, naming the argument, the value, the valid
choices and the fix (as the Trainer's own ``ConfigError`` would).
"""

from __future__ import annotations

import ast
import importlib
import re

from xtrain.core._internal.cli.suggest import match

__all__ = ["value_hints"]

_KEY = re.compile(r'^(\s*)(?:.*?)Parser key "([^"]+)":\s*$', re.MULTILINE)
_TYPE = re.compile(r"Expected a <class '([\w.]+)'>")
_LITERAL = re.compile(r"Expected a typing\.Literal\[(.*?)\]")
_GOT = re.compile(r"Got value: (.*)")
_GIVEN = re.compile(r"Given value: (.*)")
_NO_CLASS = re.compile(r"class_path '([^']+)':\s*module '([\w.]+)' has no attribute '(\w+)'")
# How to write each simple type, and an example of it; another type gets no hint (it could be a wrong one).
_TYPES = {"int": ("an int", "3"), "float": ("a float", "0.5"), "bool": ("true or false", "true"),
          "str": ("a string", "text"), "NoneType": ("null", "null")}


def _innermost(message: str) -> tuple[str, str] | None:
    """The dotted key of the innermost ``Parser key`` block and that block's text.

    A key inside a ``class_path``'s problem (``model`` then ``learning_rate``) is an init arg: ``model.init_args.
    learning_rate``. The block ends at the first line indented no deeper than its ``Parser key`` line, so the
    outer union's alternatives (``Expected a <class 'NoneType'>`` for ``model``) are not taken for the inner key's.
    """
    found = list(_KEY.finditer(message))
    if not found:
        return None
    last = found[-1]
    key = last.group(2) if len(found) == 1 else f"{found[0].group(2)}.init_args.{last.group(2)}"
    indent, lines = len(last.group(1)), []
    for line in message[last.end():].splitlines():
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        lines.append(line)
    return key, "\n".join(lines)


def _value(block: str) -> str | None:
    found = _GOT.search(block) or _GIVEN.search(block)
    return found.group(1).strip() if found else None


def _choice_hint(key: str, value: str, literal: str) -> list[str]:
    from xtrain.core.errors import format_choices

    try:
        choices = ast.literal_eval(f"[{literal}]")
    except (ValueError, SyntaxError):
        return []
    close = match(value, [str(c) for c in choices])
    guess = f"; did you mean {close[0]!r}?" if close else "."
    example = close[0] if close else str(choices[0])
    return [f"{key}={value!r} is not a valid choice{guess} Valid choices: {format_choices(choices)}. "
            f"Fix: --{key} {example} (in YAML: {key.rsplit('.', 1)[-1]}: {example})."]


def _type_hint(key: str, value: str, types: list[str]) -> list[str]:
    if not types or any(t not in _TYPES for t in types) or types == ["NoneType"]:
        return []
    kinds = [_TYPES[t] for t in dict.fromkeys(types)]
    wanted, example = next(kind for kind in kinds if kind[1] != "null")
    return [f"{key}={value!r} is not " + " or ".join(kind[0] for kind in kinds) + f". Fix: write {wanted} without "
            f"quotes, e.g. --{key} {example} (in YAML: {key.rsplit('.', 1)[-1]}: {example})."]


def _class_hints(message: str) -> list[str]:
    hints = []
    for class_path, module_name, name in _NO_CLASS.findall(message):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        classes = sorted(n for n, v in vars(module).items() if isinstance(v, type) and not n.startswith("_"))
        close = match(name, classes)
        if close:
            hints.append(f"class_path {class_path!r}: {module_name} has no {name!r}; did you mean "
                         + " or ".join(f"{module_name}.{c}" for c in close) + f"? Fix: class_path: "
                         f"{module_name}.{close[0]}.")
    return hints


def value_hints(message: str) -> list[str]:
    """Lines giving the fix for each value that ``message`` (the parser's error) refuses."""
    hints = _class_hints(message)
    inner = _innermost(message)
    if inner is None:
        return hints
    key, block = inner
    value = _value(block)
    if value is None:
        return hints
    literal = _LITERAL.search(block)
    if literal:
        return hints + _choice_hint(key, value, literal.group(1))
    return hints + _type_hint(key, value, _TYPE.findall(block))
