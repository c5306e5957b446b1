"""Importing Horovod on demand, with the error that says how to get it, and the fail-fast store it lacks.

Nothing imports ``horovod`` until a Horovod strategy is checked or set up: importing ``xtrain.strategies``, listing
strategy names or loading the strategy class never does (a broken Horovod build must not break DDP users).
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from xtrain.core.errors import ConfigError

__all__ = ["BUILD_FIX", "horovod_or_error", "horovod_store"]

BUILD_FIX = ("build Horovod 0.28.1 against this torch with xtrain's script, `python tools/build_horovod.py` from a "
             "checkout of the xtrain repository (it compiles with C++17, which torch 2.x needs and Horovod's own build "
             "does not use; about 4 minutes on 2 cores), then run again. The Horovod guide of the docs gives the "
             "same steps by hand.")


def horovod_or_error() -> Any:
    """``horovod.torch``, or the :class:`ConfigError` that says how to build it.

    Raises:
        ConfigError: Horovod is not installed, or it was built against another torch (its extension then fails to
            load with undefined symbols).
    """
    try:
        import horovod.torch as hvd
    except ImportError as err:
        missing = isinstance(err, ModuleNotFoundError) and (err.name or "").split(".")[0] == "horovod"
        problem = ("needs Horovod, which is not installed." if missing else
                   f"needs Horovod, which is installed but does not load ({type(err).__name__}: {err}); it was "
                   f"probably built against another torch version, and must be rebuilt for this one.")
        raise ConfigError("strategy", "horovod", problem, fix=BUILD_FIX) from err
    return hvd


def horovod_store(hvd: Any, *, name: str, timeout: timedelta) -> Any:
    """A ``torch.distributed.TCPStore`` shared by every Horovod rank, hosted by rank 0 on a free port.

    Horovod has no key-value store the fail-fast watchdog could use, so rank 0 starts one and tells the others its
    address through Horovod itself (a broadcast). The store lives as long as rank 0's object does.
    """
    if hvd.rank() == 0:
        store = dist.TCPStore("0.0.0.0", 0, None, True, timeout=timeout, wait_for_workers=False)  # type: ignore[attr-defined]
        host = "127.0.0.1" if hvd.cross_size() == 1 else _own_address()
        hvd.broadcast_object((host, int(store.port)), root_rank=0, name=name)
        return store
    host, port = hvd.broadcast_object(None, root_rank=0, name=name)
    return dist.TCPStore(host, port, None, False, timeout=timeout)  # type: ignore[attr-defined]


def _own_address() -> str:
    host = os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname()
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host
