"""Migrate one Python source text: parse with LibCST, plan, apply, and say what was done and what needs a person."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["Result", "migrate_python"]


@dataclass
class Result:
    """One file's migration: the new text, rewrites counted per rule, and ``(line, what to do)`` items."""

    old: str
    new: str
    counts: Counter[str] = field(default_factory=Counter)
    attention: list[tuple[int, str]] = field(default_factory=list)
    error: str | None = None

    @property
    def changed(self) -> bool:
        return self.new != self.old


def migrate_python(code: str) -> Result:
    """Rewrite Lightning code in ``code`` to xtrain; comments and formatting that no rule touches survive as they are."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper

    from xtrain.core._internal.migrate.apply import Applier
    from xtrain.core._internal.migrate.plan import Planner

    try:
        module = cst.parse_module(code)
    except cst.ParserSyntaxError as err:
        return Result(code, code, error=f"could not parse: {err.message} (line {err.raw_line})")
    wrapper = MetadataWrapper(module)
    planner = Planner()
    wrapper.visit(planner)
    plan = planner.plan
    if not plan.bindings:
        return Result(code, code)
    new = wrapper.visit(Applier(plan)).code
    return Result(code, new, plan.counts, sorted(plan.attention))
