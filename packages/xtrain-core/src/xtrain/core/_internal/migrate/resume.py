"""``Trainer(resume_from_checkpoint=X)`` (Lightning 1.x) becomes ``trainer.fit(..., ckpt_path=X)``.

The move needs the whole file: it is made only when the trainer is bound to a name that is assigned a Trainer once
and whose ``.fit`` is called once without ``ckpt_path=``; otherwise the line is flagged with the exact replacement.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import libcst as cst

from xtrain.core._internal.migrate.arguments import ArgEdit

__all__ = ["ResumeMoves"]


@dataclass
class _Pending:
    call: cst.Call
    index: int
    value: cst.BaseExpression
    name: str | None


@dataclass
class ResumeMoves:
    """What the planner saw: Trainer constructions per bound name, ``.fit`` calls per receiver, pending moves."""

    trainers: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    fits: defaultdict[str, list[cst.Call]] = field(default_factory=lambda: defaultdict(list))
    pending: list[_Pending] = field(default_factory=list)

    def trainer(self, call: cst.Call, name: str | None) -> None:
        """Record a ``Trainer(...)`` call bound to ``name`` (``None`` when it is not assigned to a plain name)."""
        if name is not None:
            self.trainers[name] += 1
        for i, arg in enumerate(call.args):
            if arg.keyword is not None and arg.keyword.value == "resume_from_checkpoint":
                self.pending.append(_Pending(call, i, arg.value, name))

    def fit(self, receiver: str, call: cst.Call) -> None:
        self.fits[receiver].append(call)

    def resolve(self, calls: dict[cst.Call, ArgEdit]) -> tuple[int, list[tuple[cst.Call, str]]]:
        """Add the moves to ``calls`` (the planned argument edits); return how many, and ``(call, advice)`` for the
        rest."""
        moved = 0
        advice: list[tuple[cst.Call, str]] = []
        for p in self.pending:
            code = cst.Module([]).code_for_node(p.value)
            fits = self.fits.get(p.name, []) if p.name is not None else []
            fit = fits[0] if len(fits) == 1 and self.trainers[p.name or ""] == 1 else None
            if fit is None or any((a.keyword is not None and a.keyword.value == "ckpt_path") or a.star == "**"
                                  for a in fit.args):
                receiver = p.name or "trainer"
                advice.append((p.call, f"resume_from_checkpoint= is not a Trainer argument: remove it and pass "
                                       f"ckpt_path={code} to {receiver}.fit(...) instead"))
                continue
            calls.setdefault(p.call, ArgEdit()).drop.add(p.index)
            calls.setdefault(fit, ArgEdit()).added.append(("ckpt_path", p.value))
            moved += 1
        return moved, advice
