"""The collective check: every rank calls the same collective, in the same order, with the same tensor layout.

A debug setting (``XTRAIN_COLLECTIVE_CHECK=1``, in the spirit of ``TORCH_DISTRIBUTED_DEBUG=DETAIL``). Before each
collective that xtrain issues (the reductions, gathers, broadcasts, barriers and decisions of every strategy,
Horovod's included; the gradient all-reduce of DDP's backward is torch's and is not seen), each rank writes a
fingerprint of it to the watchdog's store: the collective's name, the dtype and shape of its tensor, and the
innermost frame of user code that led to it. It then waits for every rank's fingerprint of the same sequence number
and compares them. A mismatch (another collective, another order, another dtype or shape) raises
:class:`~xtrain.core.errors.CollectiveMismatchError` on every rank, naming each rank's collective and file:line,
before the collective itself runs and hangs or corrupts data. A rank that never reaches its next collective leaves
the others waiting inside the check, which the hang watchdog reports as usual.

Off (the default), the progress signal's ``checker`` is ``None`` and a collective pays one comparison. On, each
collective costs one store write and one read of every rank's fingerprint (measured in the distributed guide).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from xtrain.core._internal.hang_report import is_library, write_block
from xtrain.core._internal.progress_signal import PROGRESS
from xtrain.core.errors import CollectiveMismatchError, ConfigError

__all__ = ["ENV", "CollectiveCheck", "collective_check_enabled", "install", "own_connection", "uninstall"]

ENV = "XTRAIN_COLLECTIVE_CHECK"
_ON, _OFF = ("1", "true", "on", "yes"), ("", "0", "false", "off", "no")
_OURS = (os.sep + "parallel.py", os.sep + "progress_signal.py", os.sep + "collective_check.py")


def collective_check_enabled() -> bool:
    """Whether ``XTRAIN_COLLECTIVE_CHECK`` asks for the check (``1``/``true``/``on``)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value not in _ON + _OFF:
        raise ConfigError(ENV, os.environ[ENV], "is not an on/off value.", choices=["1", "0"],
                          fix=f"export {ENV}=1 to compare every collective across ranks, or unset it.")
    return value in _ON


def _call_site() -> str:
    """The innermost frame of user code; without one, the frame that called the strategy's collective."""
    frame = sys._getframe(2)
    fallback = None
    while frame is not None:
        file = frame.f_code.co_filename
        if not is_library(file):
            return f"{file}:{frame.f_lineno} in {frame.f_code.co_name}"
        if fallback is None and not file.endswith(_OURS) and f"{os.sep}xtrain{os.sep}strategies{os.sep}" not in file:
            fallback = f"{file}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return fallback or "an unknown place"


def _layout(tensor: Any) -> list[Any]:
    if tensor is None:
        return [None, None]
    return [str(tensor.dtype).removeprefix("torch."), list(tensor.shape)]


class CollectiveCheck:
    """Compares each collective across ranks through a store; installed as the progress signal's ``checker``.

    Args:
        store: A store shared by every rank, with a fresh prefix for this run.
        rank: This process's global rank.
        world_size: The number of ranks.
    """

    def __init__(self, store: Any, *, rank: int, world_size: int) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.checked = 0

    def __call__(self, name: str, tensor: Any) -> None:
        self.checked += 1
        seq = self.checked
        mine = [name, *_layout(tensor), _call_site()]
        self.store.set(f"{seq}/{self.rank}", json.dumps(mine))
        keys = [f"{seq}/{r}" for r in range(self.world_size)]
        self.store.wait(keys)  # on a connection of its own: the watchdog's heartbeats go on meanwhile
        seen = [json.loads(value) for value in self.store.multi_get(keys)]
        if seq > 1:  # every rank has read the previous fingerprints: they posted this one after doing so
            self.store.delete_key(f"{seq - 1}/{self.rank}")
        if any(other[:3] != mine[:3] for other in seen):
            message = _describe(seq, seen, rank=self.rank)
            # Printed now as well: the first rank to fail ends the others before their tracebacks are printed.
            write_block(f"\nxtrain: {message}\n")
            raise CollectiveMismatchError(message)


def _describe(seq: int, seen: list[list[Any]], *, rank: int) -> str:
    lines = [f"collective #{seq} that xtrain issued differs between ranks ({ENV}=1 compares them before they run); "
             f"this is rank {rank}:"]
    for r, (name, dtype, shape, site) in enumerate(seen):
        layout = f" {dtype} {tuple(shape)}" if dtype is not None else ""
        lines.append(f"  rank {r}: {name}{layout} at {site}")
    lines.append("Every rank must call the same collectives in the same order with tensors of the same dtype and "
                 "shape: look for a collective (self.log(..., sync_dist=True), a barrier, a gather) under a condition "
                 "on the rank or on data that differs between ranks.")
    return "\n".join(lines)


def own_connection(store: Any) -> Any:
    """A second client of ``store`` (same server, same prefix) where the store can make one, else ``store``.

    A TCP store client serves one request at a time: a rank blocked in the check's ``wait`` on the watchdog's
    connection would stop the watchdog's heartbeats, and its neighbour would report it as killed instead of the
    hang watchdog reporting what it waits in.
    """
    clone = getattr(store, "clone", None)
    if clone is None:
        return store
    try:
        return clone()
    except Exception:  # noqa: BLE001 - a store that cannot be cloned (a HashStore, Horovod's): share it
        return store


def install(store: Any, *, rank: int, world_size: int) -> None:
    """Turn the check on for this process's collectives (when ``XTRAIN_COLLECTIVE_CHECK`` asks for it)."""
    if world_size > 1 and collective_check_enabled():
        PROGRESS.checker = CollectiveCheck(own_connection(store), rank=rank, world_size=world_size)


def uninstall() -> None:
    PROGRESS.checker = None
