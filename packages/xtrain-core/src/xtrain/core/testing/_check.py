"""How the conformance kit fails: the contract rule, what it expected, what it saw."""

from __future__ import annotations

from typing import NoReturn

import pytest

__all__ = ["check", "fail"]


def fail(rule: str, expected: object, seen: object) -> NoReturn:
    """Fail the current kit test with a message a plugin author can act on without reading the kit's source."""
    pytest.fail(f"contract rule: {rule}\n  expected: {expected}\n  seen:     {seen}", pytrace=False)


def check(ok: object, rule: str, expected: object, seen: object) -> None:
    """:func:`fail` unless ``ok`` is true."""
    if not ok:
        fail(rule, expected, seen)
