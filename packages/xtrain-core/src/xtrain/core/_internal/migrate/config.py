"""LightningCLI YAML configs: ``class_path`` values and ``trainer:`` keys, rewritten line by line so comments stay.

The YAML is not re-serialized: each line is read with the keys above it (by indentation), and only the lines a rule
touches change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from xtrain.core._internal.migrate import installed
from xtrain.core._internal.migrate.lookup import ROOTS, canonical, find, rule
from xtrain.core._internal.migrate.rules import Action, Section
from xtrain.core._internal.migrate.source import Result

__all__ = ["migrate_yaml"]

_KEY = re.compile(r"^(?P<dash>-\s+)?(?P<key>[A-Za-z_][\w.]*)\s*:(?P<sep>\s*)(?P<value>.*?)(?P<comment>\s+#.*)?$")


@dataclass
class _Entry:
    indent: int
    key: str
    target: str | None = None   # the xtrain class named by this mapping's class_path


def _scalar(value: str) -> str:
    return value.strip().strip("'\"")


class _Out:
    """The lines written so far, and the comments and counts that go with them."""

    def __init__(self, result: Result) -> None:
        self.lines: list[str] = []
        self.result = result

    def note(self, indent: int, number: int, message: str) -> None:
        if self.lines and self.lines[-1].strip() == f"# xtrain migrate: {message}":
            return
        self.lines.append(" " * indent + f"# xtrain migrate: {message}\n")
        self.result.attention.append((number, message))


def migrate_yaml(text: str) -> Result:
    """Rewrite a LightningCLI config for ``xtrain fit --config`` / ``XtrainCLI``."""
    result = Result(text, text)
    writer = _Out(result)
    out = writer.lines
    stack: list[_Entry] = []
    skip_deeper_than: int | None = None
    lines = text.splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if skip_deeper_than is not None:
            if not stripped.strip() or indent > skip_deeper_than:
                continue
            skip_deeper_than = None
        m = _KEY.match(stripped.rstrip("\n"))
        if m is None or stripped.startswith("#"):
            out.append(line)
            continue
        key_indent = indent + (len(m.group("dash")) if m.group("dash") else 0)
        while stack and stack[-1].indent >= key_indent:
            stack.pop()
        key, value = m.group("key"), m.group("value")
        parent = stack[-1] if stack else None
        grand = stack[-2] if len(stack) > 1 else None
        entry = _Entry(key_indent, key)
        prefix = line[:key_indent] if not m.group("dash") else line[:indent] + m.group("dash")
        newline = "\n" if line.endswith("\n") else ""
        comment = m.group("comment") or ""

        if key == "class_path" and _scalar(value).split(".")[0] in ROOTS:
            target = find(_scalar(value))
            if target is not None and target.kind == "name":
                line = f"{prefix}class_path: {target.qualified}{comment}{newline}"
                result.counts[f"class_path {canonical(_scalar(value))} -> {target.qualified}"] += 1
                if parent is not None:
                    parent.target = target.qualified
            else:
                writer.note(key_indent, number, target.note if target else f"{_scalar(value)} has no xtrain "
                                                                           f"equivalent")
        elif key == "class_path" and parent is not None:
            parent.target = _scalar(value)
        elif parent is not None and parent.key == "trainer" and not m.group("dash"):
            line, skip = _trainer_key(key, value, prefix, comment, newline, writer, key_indent, number)
            if skip:
                skip_deeper_than = key_indent
                continue
        elif (parent is not None and parent.key == "init_args" and grand is not None and grand.target
              and grand.target.startswith("xtrain.") and not installed.accepts(grand.target, key)):
            writer.note(key_indent, number, f"{grand.target.rpartition('.')[2]}({key}=) is not accepted by the "
                                            f"installed xtrain")
        out.append(line)
        stack.append(entry)
    result.new = "".join(out)
    return result


def _trainer_key(key: str, value: str, prefix: str, comment: str, newline: str, writer: _Out, indent: int,
                 number: int) -> tuple[str, bool]:
    """The new line for ``trainer.<key>``, and whether to drop it (with its nested lines)."""
    r = rule(Section.TRAINER_ARG, key)
    result = writer.result
    line = f"{prefix}{key}: {value}{comment}{newline}" if value else f"{prefix}{key}:{comment}{newline}"
    if r is None or r.action is Action.SAME:
        return line, False
    if r.action is Action.DROP:
        result.counts[f"trainer.{key} removed ({r.note})"] += 1
        return "", True
    if r.action is Action.RENAME and r.xtrain:
        result.counts[f"trainer.{key} -> trainer.{r.xtrain}"] += 1
        return line.replace(f"{key}:", f"{r.xtrain}:", 1), False
    if r.action is Action.TRANSLATE and key == "precision":
        canonical_value = rule(Section.PRECISION, _scalar(value))
        if canonical_value is not None and canonical_value.xtrain:
            result.counts[f"trainer.precision: {_scalar(value)} -> {canonical_value.xtrain}"] += 1
            return f"{prefix}precision: {canonical_value.xtrain}{comment}{newline}", False
        return line, False
    if r.action is Action.TRANSLATE and key == "accelerator":
        if _scalar(value) in ("ddp", "ddp_spawn", "dp", "ddp2", "horovod"):
            result.counts[f"trainer.accelerator: {_scalar(value)} -> trainer.strategy"] += 1
            return line.replace("accelerator:", "strategy:", 1), False
        return line, False
    if r.action is Action.TRANSLATE and key in ("gpus", "tpu_cores", "num_processes"):
        accelerator = {"gpus": "gpu", "tpu_cores": "tpu", "num_processes": "cpu"}[key]
        if _scalar(value) in ("0", "null", "~", ""):
            result.counts[f"trainer.{key}: 0 removed"] += 1
            return "", True
        result.counts[f"trainer.{key} -> trainer.accelerator + trainer.devices"] += 1
        return f"{prefix}accelerator: {accelerator}\n{prefix}devices: {value}{comment}{newline}", False
    writer.note(indent, number, f"trainer.{key}: {r.note}")
    return line, False
