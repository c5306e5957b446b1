"""Bounds on nested values read from disk (hyperparameters), checked without expanding them.

A hyperparameters file or a checkpoint's ``hyper_parameters`` entry can share one container many times (YAML
anchors and aliases, pickle's memo under ``weights_only=True``): a few hundred bytes that load instantly become
billions of values once something copies them (``hparams.yaml`` at fit start, ``str`` for TensorBoard). Deep nesting
makes every recursive reader (the parsers, ``repr``, the YAML writer) raise ``RecursionError``. So the size is
counted as it would be once expanded (a shared container each time it is reached), the part of it that only sharing
adds is bounded much lower than the whole (a large flat vocabulary is legitimate, ten thousand copies of one list are
not, and writing them is what hangs a fit), and the depth is the longest chain of containers. The walk is iterative
and remembers the expanded size of each container it finished, so a bomb costs as much as its few distinct
containers, and it stops at the first bound passed.
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Iterator, Mapping
from typing import Any

from xtrain.core.errors import CheckpointError

__all__ = ["MAX_DEPTH", "MAX_REPEATED", "MAX_VALUES", "bounds_problem", "check_bounded", "check_checkpoint_hparams"]

MAX_DEPTH = 100
MAX_VALUES = 1_000_000
MAX_REPEATED = 10_000
_SCALARS = frozenset({str, int, float, bool, type(None)})  # the common leaves, counted without a lookup
_HPARAMS_ENTRIES = ("hyper_parameters", "datamodule_hyper_parameters")
_FIX = ("Hyperparameters are numbers, strings and small nested configs: write each value out once (no YAML "
        "anchors/aliases or one list reused many times), keep large data (vocabularies, class weights) in a file "
        "and store its path, and flatten nesting.")


def _children(value: Any) -> Iterator[tuple[str, Any]] | None:
    """``(label, item)`` for each item of a container (a mapping's keys too, when they are containers); ``None``
    for a leaf."""
    if isinstance(value, Namespace):
        value = vars(value)
    if isinstance(value, Mapping):
        return _mapping_items(value)
    if isinstance(value, (list, tuple)):
        return ((f"[{i}]", item) for i, item in enumerate(value))
    if isinstance(value, (set, frozenset)):
        return (("{...}", item) for item in value)
    return None


def _mapping_items(mapping: Mapping[Any, Any]) -> Iterator[tuple[str, Any]]:
    for key, item in mapping.items():
        if isinstance(key, (tuple, frozenset)):
            yield f"[{key!r:.40}] (key)", key
        yield (f".{key:.40}" if isinstance(key, str) else f"[{key!r:.40}]"), item


class _Frame:
    """A container being walked: its expanded size and depth so far."""

    __slots__ = ("deepest", "items", "label", "obj", "size")

    def __init__(self, obj: Any, items: Iterator[tuple[str, Any]], label: str) -> None:
        self.obj, self.items, self.label = obj, items, label
        self.size, self.deepest = 1, 0


def _path(stack: list[_Frame], last: str) -> str:
    parts = [*(frame.label for frame in stack[1:]), last]
    if len(parts) > 8:
        parts = [*parts[:4], "...", *parts[-3:]]
    path = "".join(parts).lstrip(".")
    return repr(path) if path else "the top level"


def bounds_problem(value: Any, *, limit: int = MAX_VALUES, depth: int = MAX_DEPTH,
                   repeated: int = MAX_REPEATED) -> str | None:
    """What makes ``value`` too large, too deep or self-referencing once expanded, or ``None`` if nothing does.

    Args:
        value: Nested dicts, lists, tuples, sets and ``Namespace`` objects; anything else counts as one value.
        limit: The most values (containers and leaves) it may expand to, a shared container counted each time.
        depth: The most containers nested in one another.
        repeated: The most values that only sharing adds (a shared container's expanded size, each time it is
            reached again).
    """
    top = _children(value)
    if top is None:
        return None
    done: dict[int, tuple[Any, int, int]] = {}  # id -> (the container, kept alive so ids stay unique; size; depth)
    stack = [_Frame(value, top, "")]
    walking = {id(value)}
    total, extra = 1, 0
    while stack:
        frame = stack[-1]
        step = next(frame.items, None)
        if step is None:
            stack.pop()
            walking.discard(id(frame.obj))
            done[id(frame.obj)] = (frame.obj, frame.size, frame.deepest + 1)
            if stack:
                stack[-1].size += frame.size
                stack[-1].deepest = max(stack[-1].deepest, frame.deepest + 1)
            continue
        label, item = step
        if type(item) in _SCALARS:
            frame.size += 1
            total += 1
            if total > limit:
                return _too_many(total, limit, stack, label)
            continue
        known = done.get(id(item))
        if known is not None:
            size, nested = known[1], known[2]
            extra += size
            if extra > repeated:
                return (f"repeats shared entries: they add {extra:,} or more values once expanded (counted up to "
                        f"{_path(stack, label)}), more than the {repeated:,} allowed; YAML aliases (*name) and one "
                        f"list referenced many times are copied out each time when the hyperparameters are written "
                        f"or logged")
        elif id(item) in walking:
            return (f"refers to itself: {_path(stack, label)} is a container that holds itself, so it never ends "
                    f"when written or logged")
        else:
            items = _children(item)
            if items is None:
                size, nested = 1, 0
            elif len(stack) >= depth:
                return (f"is nested more than {depth} levels deep (at {_path(stack, label)}); at most {depth} levels "
                        f"are read")
            else:
                stack.append(_Frame(item, items, label))
                walking.add(id(item))
                total += 1
                if total > limit:
                    return _too_many(total, limit, stack[:-1], label)
                continue
        if len(stack) + nested > depth:
            return (f"is nested {len(stack) + nested} levels deep (at {_path(stack, label)}); at most {depth} levels "
                    f"are read")
        frame.size += size
        frame.deepest = max(frame.deepest, nested)
        total += size
        if total > limit:
            return _too_many(total, limit, stack, label)
    return None


def _too_many(total: int, limit: int, stack: list[_Frame], label: str) -> str:
    return (f"expands to {total:,} or more values (counted up to {_path(stack, label)}), more than the {limit:,} "
            f"that are read: shared entries (YAML aliases, one list referenced many times) count each time they "
            f"are reached, since writing or logging the hyperparameters copies them")


def check_bounded(value: Any, *, where: str, limit: int = MAX_VALUES, depth: int = MAX_DEPTH,
                  repeated: int = MAX_REPEATED) -> None:
    """Refuse ``value`` read from ``where`` (e.g. ``"hparams_file '/run/hparams.yaml'"``) if it is too large, too
    deep or self-referencing once expanded (see :func:`bounds_problem`), before anything copies or walks it.

    Raises:
        CheckpointError: Naming ``where``, the value found, the limit and the fix.
    """
    problem = bounds_problem(value, limit=limit, depth=depth, repeated=repeated)
    if problem is not None:
        raise CheckpointError(f"{where} {problem}. Fix: {_FIX}")


def check_checkpoint_hparams(checkpoint: Mapping[str, Any], path: str) -> None:
    """Apply :func:`check_bounded` to the ``hyper_parameters`` and ``datamodule_hyper_parameters`` entries of the
    checkpoint read from ``path``: they are what ``load_from_checkpoint`` passes to ``__init__`` and what the
    loggers write at fit start.

    Raises:
        CheckpointError: An entry is too large, too deep or self-referencing once expanded.
    """
    for key in _HPARAMS_ENTRIES:
        if key in checkpoint:
            check_bounded(checkpoint[key], where=f"checkpoint {path!r}: entry {key!r}")
