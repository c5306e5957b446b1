"""What the migrate trial tests share: migrating a snippet, the notes it got, running what came out.

Import it after ``pytest.importorskip("libcst")``: the migrate tool needs libcst.
"""

from __future__ import annotations

import textwrap

from xtrain.core._internal.migrate.source import Result, migrate_python

__all__ = ["messages", "run", "runs"]


def run(code: str) -> Result:
    """``code`` (indented as in the test) through ``xtrain migrate``."""
    return migrate_python(textwrap.dedent(code))


def messages(result: Result) -> list[str]:
    return [m for _, m in result.attention]


def runs(code: str) -> dict[str, object]:
    """Execute migrated code (Lightning is not installed here, so any Lightning import left would fail)."""
    namespace: dict[str, object] = {"__name__": "migrated"}
    exec(compile(code, "<migrated>", "exec"), namespace)
    return namespace
