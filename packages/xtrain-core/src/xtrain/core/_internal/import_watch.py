"""A notice on stderr for a call still running after a while (one that may never return): a plugin import, or
the process-group rendezvous waiting for a node that never started.

An import cannot be interrupted, but the user can be told which package to remove. One daemon thread serves every
import of the process: a timer thread per import cost about a millisecond each, and the first ``Trainer()`` imports
every plugin of a group.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time

__all__ = ["Watch", "watch_import"]


class Watch:
    """A watched import: :meth:`cancel` it when the import returns."""

    def __init__(self, key: int) -> None:
        self._key = key

    def cancel(self) -> None:
        with _STATE.condition:
            _STATE.pending.pop(self._key, None)


class _State:
    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.pending: dict[int, tuple[float, str]] = {}  # key -> (deadline, notice)
        self.thread: threading.Thread | None = None
        self.keys = itertools.count()


_STATE = _State()


def _reset_in_child() -> None:
    """A forked child has no watcher thread (and maybe a held lock): start afresh."""
    global _STATE
    _STATE = _State()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_in_child)


def watch_import(seconds: float, notice: str) -> Watch:
    """Print ``notice`` to stderr unless the returned watch is cancelled within ``seconds``."""
    state = _STATE
    with state.condition:
        key = next(state.keys)
        state.pending[key] = (time.monotonic() + seconds, notice)
        if state.thread is None:
            state.thread = threading.Thread(target=_watch, args=(state,), name="xtrain-import-watch", daemon=True)
            state.thread.start()
        state.condition.notify()
    return Watch(key)


def _watch(state: _State) -> None:
    while True:
        with state.condition:
            while not state.pending:
                state.condition.wait()
            key, (deadline, notice) = min(state.pending.items(), key=lambda item: item[1][0])
            remaining = deadline - time.monotonic()
            if remaining > 0:
                state.condition.wait(remaining)
                continue
            del state.pending[key]
        try:
            print(notice, file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 - a closed stderr must not raise in a background thread
            pass
