"""Callback states in checkpoints: one entry per ``state_key``, so two stateful callbacks must not share a key.

A checkpoint keeps the callbacks' states in a dict keyed by :attr:`Callback.state_key` (the class name unless the
class overrides it). Two stateful callbacks with one key (``callbacks=[Counter(1), Counter(100)]``) silently shared
one saved state: the second's overwrote the first's, and a resume loaded it into both. Lightning refuses that
("Found more than one stateful callback of type ..."), and so does xtrain, before anything starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.callbacks import Callback

__all__ = ["callback_states", "check_unique_state_keys", "is_stateful"]


def is_stateful(callback: Callback) -> bool:
    """Whether ``callback`` keeps a state in checkpoints: its class overrides ``state_dict``, and either restores it
    (overrides ``load_state_dict``: its ``state_dict`` may be empty until it tracked something) or returns one now.

    A class that overrides ``state_dict`` only to return ``{}`` saves nothing, so it may appear twice.
    """
    from xtrain.core.callbacks import Callback

    cls = type(callback)
    if getattr(cls, "state_dict", None) is Callback.state_dict:
        return False
    if getattr(cls, "load_state_dict", None) is not Callback.load_state_dict:
        return True
    try:
        return bool(callback.state_dict())
    except Exception:  # noqa: BLE001 - a state_dict that needs a running Trainer still has a state
        return True


def check_unique_state_keys(callbacks: Iterable[Callback], argument: str = "callbacks") -> None:
    """Refuse two stateful callbacks with one ``state_key`` (``argument`` names where they came from)."""
    seen: dict[str, Callback] = {}
    for callback in callbacks:
        if not is_stateful(callback):
            continue
        key = callback.state_key
        first = seen.setdefault(key, callback)
        if first is not callback:
            _refuse(argument, first, callback, key)


def _refuse(argument: str, first: Callback, second: Callback, key: str) -> None:
    kinds = sorted({type(first).__name__, type(second).__name__})
    raise ConfigError(
        argument, [type(first).__name__, type(second).__name__],
        f"holds more than one stateful callback of type {' and '.join(kinds)} with state_key {key!r}: checkpoints keep "
        f"one state per state_key, so one would overwrite the other's and a resume would load the same state into "
        f"both (Lightning refuses this too: the callback.state_key must be unique).",
        fix=f"give each a distinct state_key: override the state_key property in {kinds[0]} to include the arguments "
            f"that tell instances apart, e.g. `return self._generate_state_key(what=self.what)`, as ModelCheckpoint "
            f"and EarlyStopping do with monitor and mode; or pass only one of them.")


def callback_states(callbacks: Iterable[Callback]) -> dict[str, Any]:
    """The ``callbacks`` entry of a checkpoint, ``{state_key: state_dict()}``, refusing a shared key.

    The Trainer checks its callbacks when it is built and when a stage sets up (with the module's
    ``configure_callbacks``); this catches those added later (``trainer.callbacks.append`` in a hook) before their
    states overwrite each other in a file.
    """
    states: dict[str, Any] = {}
    owners: dict[str, Callback] = {}
    for callback in callbacks:
        key = callback.state_key
        state = callback.state_dict()
        if key in owners:  # rare: only then is it worth asking which of the two keeps a state
            first_stateful, stateful = is_stateful(owners[key]), is_stateful(callback)
            if first_stateful and stateful:
                _refuse("callbacks", owners[key], callback, key)
            if first_stateful:  # a stateless namesake's {} must not replace it
                continue
        states[key] = state
        owners[key] = callback
    return states
