"""The environment torchrun gives each rank, for tests that start two ranks of a script themselves."""

from __future__ import annotations

__all__ = ["torchrun_env"]


def torchrun_env(rank: int, port: int, *, run_id: str, world_size: int = 2) -> dict[str, str]:
    """What torchrun sets for ``rank`` of ``world_size`` processes on one node, rendezvous at ``port``."""
    return {"TORCHELASTIC_RUN_ID": run_id, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size), "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port)}
