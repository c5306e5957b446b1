"""LightningCLI YAML configs: ``class_path`` values and ``trainer:`` keys, rewritten line by line so comments stay.

The YAML is not re-serialized: each line is read with the keys above it (by indentation), and only the lines a rule
touches change. ``init_args`` of a Lightning class follow the same argument rows of the rule table as the Python
rewrite (``TQDMProgressBar(refresh_rate=)`` removed, ``SLURMEnvironment(auto_requeue=true)`` removed, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from xtrain.core._internal.migrate import installed
from xtrain.core._internal.migrate.argvalues import (
    DEVICE_COUNTS,
    NULL,
    device_move,
    flag_note,
    removable,
    yaml_value,
)
from xtrain.core._internal.migrate.lookup import ROOTS, canonical, find, rule, rules
from xtrain.core._internal.migrate.rules import Action, Section
from xtrain.core._internal.migrate.source import Result

__all__ = ["migrate_yaml"]

_LIGHTNING_CONFIG = re.compile(r"^trainer\s*:|class_path\s*:\s*['\"]?(lightning|pytorch_lightning|lightning_fabric)\.",
                               re.MULTILINE)
_LOGS = rules(Section.BEHAVIOUR)["lightning_logs/"]
_KEY = re.compile(r"^(?P<dash>-\s+)?(?P<key>[A-Za-z_][\w.]*)\s*:(?P<sep>\s*)(?P<value>.*?)(?P<comment>\s+#.*)?$")
_STRATEGY_AS_ACCELERATOR = ("ddp", "ddp_spawn", "dp", "ddp2", "horovod")   # trainer.accelerator that moves to strategy


@dataclass
class _Entry:
    indent: int
    key: str
    target: str | None = None   # the xtrain class named by this mapping's class_path
    lightning: str = ""         # and the Lightning class it replaced (its last name), whose argument rows apply
    given: set[str] = field(default_factory=set)   # a ``trainer:`` mapping's keys (as the migrated config has them)


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
    lightning_config = _LIGHTNING_CONFIG.search(text) is not None
    for number, line in enumerate(lines, start=1):
        original = line
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if skip_deeper_than is not None:
            if not stripped.strip() or indent > skip_deeper_than:
                continue
            skip_deeper_than = None
        m = _KEY.match(stripped.rstrip("\n"))
        if m is None or stripped.startswith("#"):
            out.append(_flow_class_paths(line, writer, indent, number) if not stripped.startswith("#") else line)
            continue
        key_indent = indent + (len(m.group("dash")) if m.group("dash") else 0)
        while stack and stack[-1].indent >= key_indent:
            stack.pop()
        key, value = m.group("key"), m.group("value")
        parent = stack[-1] if stack else None
        grand = stack[-2] if len(stack) > 1 else None
        entry = _Entry(key_indent, key, given=_trainer_keys(lines[number:], key_indent) if key == "trainer" else set())
        prefix = line[:key_indent] if not m.group("dash") else line[:indent] + m.group("dash")
        newline = "\n" if line.endswith("\n") else ""
        comment = m.group("comment") or ""

        if key == "class_path" and _scalar(value).split(".")[0] in ROOTS:
            renamed = _renamed(_scalar(value), writer, key_indent, number)
            if renamed is not None:
                line = f"{prefix}class_path: {renamed}{comment}{newline}"
                if parent is not None:
                    parent.target = renamed
                    parent.lightning = canonical(_scalar(value)).rpartition(".")[2]
        elif key == "class_path" and parent is not None:
            parent.target, parent.lightning = _scalar(value), ""
        elif parent is not None and parent.key == "trainer" and not m.group("dash"):
            line, skip = _trainer_key(key, value, prefix, comment, newline, writer, key_indent, number, parent.given)
            if skip:
                skip_deeper_than = key_indent
                continue
        elif (parent is not None and parent.key == "init_args" and grand is not None and grand.target
              and grand.target.startswith("xtrain.")):
            line, skip = _init_arg(grand, key, value, line, writer, key_indent, number)
            if skip:
                skip_deeper_than = key_indent
                continue
        if key != "class_path" and "{" in value:
            line = _flow_class_paths(line, writer, key_indent, number)
        if lightning_config and line == original and "lightning_logs" in value:
            # the default log directory, as in Python strings: the value only, never a key or a comment
            start = indent + m.start("value")
            line = line[:start] + value.replace("lightning_logs", "xtrain_logs") + line[start + len(value):]
            result.counts[f"{_LOGS.lightning} -> {_LOGS.xtrain}"] += 1
        out.append(line)
        stack.append(entry)
    result.new = "".join(_without_empty_init_args(out) if result.counts else out)
    return result


_FLOW_CLASS_PATH = re.compile(r"(class_path\s*:\s*)(['\"]?)([A-Za-z_][\w.]*)\2")


def _flow_class_paths(line: str, writer: _Out, indent: int, number: int) -> str:
    """The ``class_path``s of a flow mapping on one line (``logger: {class_path: lightning...., init_args: {...}}``),
    renamed as block ones are; its ``init_args`` are not checked against the argument rows, which the note says."""
    if "{" not in line or "class_path" not in line:
        return line

    def rename(m: re.Match[str]) -> str:
        name = m.group(3)
        renamed = _renamed(name, writer, indent, number) if name.split(".")[0] in ROOTS else None
        if renamed is None:
            return m.group(0)
        refused = [key for key in _flow_init_args(line) if not installed.accepts(renamed, key)]
        if refused:
            writer.note(indent, number, f"{renamed.rpartition('.')[2]}({refused[0]}=) is not accepted by the "
                                        f"installed xtrain (init_args in flow style: write the mapping in block "
                                        f"style to have Lightning's arguments migrated)")
        return f"{m.group(1)}{m.group(2)}{renamed}{m.group(2)}"

    return _FLOW_CLASS_PATH.sub(rename, line)


def _renamed(name: str, writer: _Out, indent: int, number: int) -> str | None:
    """The xtrain class for Lightning's ``name`` (counted), or ``None`` with a note saying why there is none."""
    target = find(name)
    if target is None or target.kind != "name":
        writer.note(indent, number, target.note if target else f"{name} has no xtrain equivalent")
        return None
    writer.result.counts[f"class_path {canonical(name)} -> {target.qualified}"] += 1
    return target.qualified


def _flow_init_args(line: str) -> list[str]:
    """The ``init_args`` keys of the one flow mapping on ``line`` (none when it holds several or does not parse)."""
    try:
        import yaml  # the cli extra's; without it the keys go unchecked, as before
    except ImportError:
        return []
    if line.count("class_path") != 1:
        return []
    try:
        value = yaml.safe_load(line[line.index("{"):].split(" #")[0])
    except (yaml.YAMLError, RecursionError, ValueError):  # nested past the stack, an int of thousands of digits
        return []
    init_args = value.get("init_args") if isinstance(value, dict) else None
    return [str(key) for key in init_args] if isinstance(init_args, dict) else []


def _trainer_keys(following: list[str], indent: int) -> set[str]:
    """The keys of the mapping at ``indent`` whose lines are ``following``, as a call's keywords are to the Python
    rewrite (an ``accelerator:`` that names a strategy is not one: it becomes ``strategy:``)."""
    keys: set[str] = set()
    level: int | None = None
    for line in following:
        stripped = line.lstrip(" ")
        if not stripped.strip() or stripped.startswith("#"):
            continue
        depth = len(line) - len(stripped)
        if depth <= indent:
            break
        level = depth if level is None else level
        m = _KEY.match(stripped.rstrip("\n"))
        if depth == level and m is not None and not m.group("dash") and not (
                m.group("key") == "accelerator" and _scalar(m.group("value")) in _STRATEGY_AS_ACCELERATOR):
            keys.add(m.group("key"))
    return keys


def _without_empty_init_args(lines: list[str]) -> list[str]:
    """``lines`` less each ``init_args:`` left without keys (all of them removed): jsonargparse reads a bare
    ``init_args:`` as ``null``, which is not a mapping of arguments."""
    kept: list[str] = []
    for i, line in enumerate(lines):
        stripped = line.lstrip(" ")
        if re.match(r"init_args\s*:\s*(#.*)?$", stripped.rstrip("\n")):
            indent = len(line) - len(stripped)
            following = next((s for s in lines[i + 1:] if s.strip() and not s.lstrip().startswith("#")), "")
            if not following or len(following) - len(following.lstrip(" ")) <= indent:
                continue
        kept.append(line)
    return kept


def _init_arg(owner: _Entry, key: str, value: str, line: str, writer: _Out, indent: int,
              number: int) -> tuple[str, bool]:
    """The line for ``init_args.<key>`` of ``owner``'s class, by the Lightning class's argument rows (as for a call in
    Python), else checked against the installed xtrain class; and whether to drop it (with its nested lines)."""
    assert owner.target is not None
    label = f"{owner.lightning}({key}=)"
    r = rule(Section.ARGUMENT, label) if owner.lightning else None
    shown = owner.target.rpartition(".")[2]
    gone = removable(label, yaml_value(value)) if r is not None and r.action is Action.TRANSLATE else None
    if r is not None and (r.action is Action.DROP or gone):
        writer.result.counts[f"{label} removed ({r.note})" if r.action is Action.DROP
                             else f"{label} removed (Lightning's default: xtrain does this itself)"] += 1
        return "", True
    if gone is False:
        writer.note(indent, number, flag_note(label, f"{key}={_scalar(value)}"))
    elif r is not None and r.action is Action.RENAME and r.xtrain is not None:
        writer.result.counts[f"{label} -> {r.xtrain}="] += 1
        return line.replace(f"{key}:", f"{r.xtrain}:", 1), False
    elif r is not None and r.action is Action.MISSING:
        writer.note(indent, number, f"{shown}({key}=): {r.note}")
    elif (r is None or r.action is Action.SAME) and not installed.accepts(owner.target, key):
        writer.note(indent, number, f"{shown}({key}=) is not accepted by the installed xtrain")
    return line, False


def _trainer_key(key: str, value: str, prefix: str, comment: str, newline: str, writer: _Out, indent: int,
                 number: int, given: set[str]) -> tuple[str, bool]:
    """The new line for ``trainer.<key>`` of a ``trainer:`` mapping with the keys ``given``, and whether to drop it
    (with its nested lines)."""
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
        if _scalar(value) in _STRATEGY_AS_ACCELERATOR:
            result.counts[f"trainer.accelerator: {_scalar(value)} -> trainer.strategy"] += 1
            return line.replace("accelerator:", "strategy:", 1), False
        return line, False
    if r.action is Action.TRANSLATE and key == "resume_from_checkpoint" and _scalar(value) in NULL:
        result.counts["trainer.resume_from_checkpoint: null removed"] += 1
        return "", True
    if r.action is Action.TRANSLATE and key in DEVICE_COUNTS:
        return _device_count(key, value, prefix, comment, newline, writer, indent, number, given)
    if r.action is Action.MISSING and _scalar(value) in NULL and value.strip():
        # An argument xtrain lacks, at null (as Lightning's config.yaml writes every default): nothing to keep.
        result.counts[f"trainer.{key}: null removed (not in xtrain)"] += 1
        return "", True
    writer.note(indent, number, f"trainer.{key}: {r.note}")
    return line, False


def _device_count(key: str, value: str, prefix: str, comment: str, newline: str, writer: _Out, indent: int,
                  number: int, given: set[str]) -> tuple[str, bool]:
    """``trainer.gpus`` / ``tpu_cores`` / ``num_processes`` (Lightning 1.x), as the Python rewrite does with the same
    call arguments (:func:`~xtrain.core._internal.migrate.argvalues.device_move`): 0 or null meant the CPU."""
    move = device_move(key, yaml_value(value), given)
    counts = writer.result.counts
    if move is None:
        writer.note(indent, number, f"trainer.{key} and trainer.devices are both given: keep devices and remove {key}")
        return f"{prefix}{key}: {value}{comment}{newline}", False
    if not move.devices and move.accelerator is None:
        counts[f"trainer.{key}: 0 removed"] += 1
        return "", True
    if not move.devices:
        counts[f"trainer.{key}: {_scalar(value) or 'null'} -> trainer.accelerator: {move.accelerator} (Lightning 1.x "
               "ran on the CPU)"] += 1
        return f"{prefix}accelerator: {move.accelerator}{comment}{newline}", False
    counts[f"trainer.{key} -> trainer.accelerator + trainer.devices"] += 1
    accelerator = f"{prefix}accelerator: {move.accelerator}\n" if move.accelerator is not None else ""
    return f"{accelerator}{prefix}devices: {value}{comment}{newline}", False
