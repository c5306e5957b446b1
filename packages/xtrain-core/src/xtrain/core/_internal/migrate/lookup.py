"""From a Lightning name to what replaces it: the rule table read as lookups, checked against the installed xtrain."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Literal

from xtrain.core._internal.migrate import installed
from xtrain.core._internal.migrate.rules import RULES, Action, Rule, Section

__all__ = ["ROOTS", "Target", "canonical", "find", "rule", "rules"]

ROOTS = ("lightning", "pytorch_lightning", "lightning_fabric")
_TOP_LEVEL = {"LightningModule": "pytorch", "LightningDataModule": "pytorch", "Trainer": "pytorch",
              "Callback": "pytorch", "seed_everything": "pytorch", "Fabric": "fabric"}
_AVAILABLE = re.compile(r"^_([A-Z][A-Z0-9]*)_AVAILABLE$")
_PACKAGES = {"PIL": "PIL", "TENSORBOARDX": "tensorboardX"}


def canonical(name: str) -> str:
    """``pytorch_lightning.X`` -> ``lightning.pytorch.X``; ``lightning.Trainer`` -> ``lightning.pytorch.Trainer``."""
    parts = name.split(".")
    if parts[0] == "pytorch_lightning":
        parts[:1] = ["lightning", "pytorch"]
    elif parts[0] == "lightning_fabric":
        parts[:1] = ["lightning", "fabric"]
    elif parts[0] == "lightning" and len(parts) > 1 and parts[1] in _TOP_LEVEL:
        parts[1:1] = [_TOP_LEVEL[parts[1]]]
    return ".".join(parts)


@cache
def rules(section: Section) -> dict[str, Rule]:
    return {r.lightning: r for r in RULES if r.section is section}


def rule(section: Section, key: str) -> Rule | None:
    return rules(section).get(key)


@dataclass(frozen=True)
class Target:
    """What a Lightning name becomes: ``name`` (import ``qualified``), ``module``, ``drop``, ``define`` or ``missing``."""

    kind: Literal["name", "module", "drop", "define", "missing"]
    qualified: str = ""
    note: str = ""
    label: str = ""
    lightning: str = ""

    @property
    def module(self) -> str:
        return self.qualified.rpartition(".")[0]

    @property
    def last(self) -> str:
        return self.qualified.rpartition(".")[2]


def _module_like(part: str) -> bool:
    return part.islower() or (part.startswith("_") and part[1:].islower())


def _name_rule(name: str) -> Rule | None:
    parts = name.split(".")
    found = rules(Section.NAME)
    for end in range(len(parts) - 1, 0, -1):
        hit = found.get(".".join(parts[:end]) + "." + parts[-1])
        if hit is not None:
            return hit
        if not _module_like(parts[end - 1]):
            return None
    return None


def _from_rule(r: Rule, name: str) -> Target:
    label = f"{r.lightning} -> {r.xtrain}" if r.xtrain else r.lightning
    if r.action is Action.DROP:
        return Target("drop", note=r.note, label=label)
    if r.action is Action.MISSING or r.xtrain is None:
        return Target("missing", note=f"{name.rpartition('.')[2]}: {r.note}", label=label)
    if r.xtrain.startswith("xtrain.") and not installed.exists(r.xtrain):
        return Target("missing", note=f"{r.xtrain} is not in the installed xtrain (upgrade xtrain-core, or install "
                                      f"the package that provides it)", label=label)
    return Target("name", r.xtrain, r.note, label, r.lightning)


_DUNDER = {
    "__version__": "Lightning's version; xtrain's is xtrain.core.__version__, another number: a check of Lightning's "
                   "version does not apply to xtrain (remove it, or check xtrain.core.__version__)",
    "__name__": "the name of Lightning's module; xtrain's is 'xtrain.core'",
}


def find(name: str) -> Target | None:
    """What replaces the Lightning name ``name`` (any spelling); ``None`` when it is not a name the table can read
    (an attribute of a class, say), so the caller tries the shorter chain inside it."""
    name = canonical(name)
    last = name.rpartition(".")[2]
    if ".utilities" in name and (m := _AVAILABLE.match(last)) and "GREATER" not in last:
        return Target("define", _PACKAGES.get(m.group(1), m.group(1).lower()),
                      label=f"{name} -> importlib.util.find_spec(...)")
    hit = _name_rule(name)
    if hit is not None:
        return _from_rule(hit, name)
    modules = rules(Section.MODULE)
    if name in modules:
        r = modules[name]
        if r.xtrain is None or r.action is Action.MISSING:
            return Target("missing", note=f"{name}: {r.note}", label=name)
        if r.xtrain.startswith("xtrain.") and not installed.exists(r.xtrain):
            return Target("missing", note=f"{r.xtrain} is not in the installed xtrain", label=name)
        return Target("module", r.xtrain, label=f"{name} -> {r.xtrain}")
    parts = name.split(".")
    for end in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in modules:
            if not all(_module_like(p) for p in parts[end:-1]):
                return None
            r = modules[prefix]
            if r.xtrain is None or r.action is Action.MISSING:
                return Target("missing", note=f"{last}: {r.note}", label=prefix)
            same = f"{r.xtrain}.{last}"
            if last.startswith("__") and last.endswith("__"):  # never import a module's dunder into the script
                return Target("missing", note=_DUNDER.get(last, f"{prefix}.{last} is Lightning's module's own; keep it "
                                                                "or use xtrain's module's"), label=f"{prefix}.{last}")
            if installed.exists(same):
                return Target("name", same, label=f"{prefix} -> {r.xtrain}", lightning=name)
            return Target("missing", note=f"{last} has no xtrain equivalent in {r.xtrain}; keep Lightning's or "
                                          f"write your own", label=f"{prefix}.{last}")
    if _module_like(last) and len(parts) > 2:
        return None
    return Target("missing", note=f"{name} has no xtrain equivalent", label=name)
