"""What ``Engine.save`` may write: only values that ``Engine.load`` can read back.

Checkpoints are read with ``weights_only=True`` (a file can never run code), so an arbitrary object pickled into one
makes the file unloadable, and the user finds out at the resume that needed it. The state is checked by the rule of
:mod:`~xtrain.core._internal.loadable` before anything is written, and the refusal names the entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xtrain.core._internal.loadable import first_unloadable
from xtrain.core.errors import ConfigError

__all__ = ["refuse_unloadable"]


def refuse_unloadable(checkpoint: dict[str, Any], path: str | Path) -> None:
    """Raise :class:`ConfigError` naming the first entry of ``checkpoint`` that a ``weights_only`` load refuses."""
    for key, value in checkpoint.items():
        found = first_unloadable(value, f"state[{key!r}]")
        if found is None:
            continue
        where, odd = found
        raise ConfigError(
            "state", f"{where}: a {type(odd).__module__}.{type(odd).__qualname__}",
            f"cannot go into the checkpoint {str(path)!r}: engine.load reads checkpoints with weights_only=True (a "
            f"file can never run code), which refuses such objects, so the file could not be loaded back.",
            fix="pass an object with state_dict() and load_state_dict() (it is saved as its state, as a set-up "
                "dataloader or a scheduler is), or store its plain values: tensors, numbers, strings, None, and "
                "lists, tuples and dicts of them.")
