"""How the conformance kit fails: the contract rule, what it expected, what it saw."""

from __future__ import annotations

from typing import NoReturn

import pytest

__all__ = ["check", "check_declared_data", "fail", "require_registered_name"]


def fail(rule: str, expected: object, seen: object) -> NoReturn:
    """Fail the current kit test with a message a plugin author can act on without reading the kit's source."""
    pytest.fail(f"contract rule: {rule}\n  expected: {expected}\n  seen:     {seen}", pytrace=False)


def check(ok: object, rule: str, expected: object, seen: object) -> None:
    """:func:`fail` unless ``ok`` is true."""
    if not ok:
        fail(rule, expected, seen)


def check_declared_data(group: str, plugin: object, contract: str) -> None:
    """Fail on the first attribute ``plugin`` declares wrongly, by the rules the registry refuses a plugin with."""
    from xtrain.core._internal.plugin_checks import MISSING, declared_data_mismatches

    for attribute, expected, value in declared_data_mismatches(group, plugin)[:1]:
        fail(f"{contract} class attributes are data of the documented types: {attribute}", expected,
             "not declared" if value is MISSING else repr(value))


def require_registered_name(kit: type, attribute: str, group: str) -> None:
    """Refuse, when the test class is defined, a kit attribute that must be a registered name but is not a ``str``.

    The accelerator kit takes the class; the strategy and precision kits run the plugin in new processes, which find
    it by its entry point name. A class given there failed deep inside the registry (``'type' object has no
    attribute 'strip'``).
    """
    value = kit.__dict__.get(attribute)
    if value is None or isinstance(value, str):
        return
    shown = getattr(value, "__name__", repr(value))
    raise TypeError(f"{kit.__name__}.{attribute} = {shown}: this kit takes the name the plugin is registered under in "
                    f"the {group!r} entry-point group (a str), because its training check finds the plugin by name in "
                    f"new processes. Fix: register {shown} in your pyproject.toml's "
                    f"[project.entry-points.\"{group}\"] table and write {attribute} = \"<that name>\".")
