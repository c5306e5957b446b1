"""What of a Lightning import statement survives its rewrite: the non-Lightning parts, and Lightning names kept.

One line may import Lightning beside other modules (``import os, torch, lightning.pytorch as pl``) or hold other
statements (``import torch; from lightning import Trainer``). The rewrite replaces only the Lightning parts: dropping
the line with them would silently lose ``os`` and ``torch`` and fail at run time with a ``NameError``.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from xtrain.core._internal.migrate.decisions import Binding, dotted
from xtrain.core._internal.migrate.lookup import ROOTS

__all__ = ["kept_lightning", "others"]


def _lightning_module(small: cst.BaseSmallStatement) -> bool:
    return (isinstance(small, cst.ImportFrom) and small.relative == () and small.module is not None
            and dotted(small.module).split(".")[0] in ROOTS)


def _is_lightning(alias: cst.ImportAlias) -> bool:
    return dotted(alias.name).split(".")[0] in ROOTS


def _local(alias: cst.ImportAlias, module_import: bool) -> str:
    if isinstance(alias.asname, cst.AsName) and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return dotted(alias.name).split(".")[0] if module_import else dotted(alias.name)


def _aliases(names: Sequence[cst.ImportAlias]) -> list[cst.ImportAlias]:
    out = list(names)
    if out:
        out[-1] = out[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return out


def _line(node: cst.SimpleStatementLine, body: list[cst.BaseSmallStatement]) -> cst.SimpleStatementLine | None:
    if not body:
        return None
    body[-1] = body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
    return node.with_changes(body=body)


def others(node: cst.SimpleStatementLine) -> tuple[cst.SimpleStatementLine | None, bool]:
    """``node`` without its Lightning imports (``None`` if nothing else is in it), and whether it holds only imports
    (which then stay first, where they were; another statement may use a Lightning name, so it goes after the xtrain
    imports)."""
    body: list[cst.BaseSmallStatement] = []
    for small in node.body:
        if isinstance(small, cst.Import):
            kept = [a for a in small.names if not _is_lightning(a)]
            if kept:
                body.append(small.with_changes(names=_aliases(kept)))
        elif not _lightning_module(small) or isinstance(getattr(small, "names", None), cst.ImportStar):
            body.append(small)  # a Lightning ``*`` import is flagged and never rewritten
    only_imports = all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in body)
    return _line(node, body), only_imports


def kept_lightning(node: cst.SimpleStatementLine, bindings: list[Binding]) -> cst.SimpleStatementLine | None:
    """The Lightning imports of ``node`` that stay for the names xtrain cannot replace (flagged uses)."""
    keep = {b.local for b in bindings if b.is_module_import or (
        (b.target is None or b.target.kind == "missing") and not b.resolved)}
    body: list[cst.BaseSmallStatement] = []
    for small in node.body:
        if isinstance(small, cst.Import):
            names = [a for a in small.names if _is_lightning(a) and _local(a, True) in keep]
        elif _lightning_module(small) and isinstance(small, cst.ImportFrom) and not isinstance(small.names,
                                                                                               cst.ImportStar):
            names = [a for a in small.names if _local(a, False) in keep]
        else:
            continue
        if names:
            body.append(small.with_changes(names=_aliases(names)))
    return _line(node, body)
