"""A process-group store that a torchrun restart cannot confuse with the previous attempt's.

By default torchrun shares its rendezvous store with the workers (``TORCHELASTIC_USE_AGENT_STORE=True``). That
store outlives a restart, and torch's ``env://`` initialization does not prefix its keys per attempt, so a restarted
group can read the previous group's addresses and fail with gloo's "connection refused" (or wait for the process
group timeout). Keying the group by the restart count and the world size (a membership change that keeps the
count changes the size) gives every attempt keys of its own.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

__all__ = ["attempt_store"]


def attempt_store(timeout: timedelta) -> Any:
    """The store for ``init_process_group(store=...)`` under torchrun's shared store, else ``None`` (``env://``)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    import torch.distributed as dist

    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),  # type: ignore[attr-defined]
                          is_master=False, timeout=timeout)
    return dist.PrefixStore(  # type: ignore[attr-defined]
        f"xtrain/attempt_{attempt}/world_{os.environ.get('WORLD_SIZE', '')}/", store)
