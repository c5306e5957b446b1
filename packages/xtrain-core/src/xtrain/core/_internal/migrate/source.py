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
    stars: int = 0   # ``from lightning... import *`` left: never migrated, so ``--check`` fails on them every run

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
    if not plan.bindings and not plan.stars:
        # not a Lightning file: a ``trainer.X`` here may be any object's, so nothing is rewritten or flagged. A file
        # whose only Lightning imports are ``*`` imports is one, and its flags must reach the summary and ``--check``
        return Result(code, code)
    new = wrapper.visit(Applier(plan)).code
    return Result(code, new, plan.counts, sorted(plan.attention), stars=len(plan.stars))
