"""A YAML key written twice in one mapping: YAML keeps the second without a word, so a file that sets a value twice
means something other than what its first line says. The CLI's configs and ``hparams_file`` refuse it."""

from __future__ import annotations

from typing import Any

__all__ = ["repeated_key", "repeated_key_in"]


def repeated_key(text: str, loader: Any) -> str | None:
    """Why ``text`` cannot be read as written (a key twice in one mapping, with both lines), or ``None``.

    Only the node tree is composed (nothing is constructed, so no tag runs; an alias stays one shared node); text
    that is not YAML is left to the caller's parser and its own error.
    """
    import yaml

    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.YAMLError:
        return None
    return repeated_key_in(root)


def repeated_key_in(root: Any) -> str | None:
    """:func:`repeated_key` for a composed node tree (``None`` for an empty document)."""
    import yaml

    pending = [root] if root is not None else []
    visited: set[int] = set()  # an alias is the node it names: walk it once (an alias bomb must not expand here)
    while pending:
        node = pending.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        if isinstance(node, yaml.MappingNode):
            lines: dict[str, int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in lines:
                        return (f"the key {key.value!r} is written twice in one mapping (lines {lines[key.value] + 1} "
                                f"and {key.start_mark.line + 1}); YAML would silently keep only the second")
                    lines[key.value] = key.start_mark.line
                pending.append(value)
        elif isinstance(node, yaml.SequenceNode):
            pending.extend(node.value)
    return None
