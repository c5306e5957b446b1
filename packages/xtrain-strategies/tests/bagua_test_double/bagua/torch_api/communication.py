"""TEST DOUBLE of ``bagua.torch_api.communication``: ``init_process_group`` on gloo (real Bagua: NCCL + its own
communicators, and a CUDA stream), ``is_initialized``."""

import os
from typing import Any

import torch.distributed as dist

from bagua.torch_api._record import record

_default_pg: Any = None
REQUIRED = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def is_initialized() -> bool:
    return _default_pg is not None


def init_process_group(store: Any = None) -> None:
    global _default_pg
    if _default_pg is not None:
        raise RuntimeError("trying to initialize the default process group twice!")  # as Bagua does
    missing = [name for name in REQUIRED if name not in os.environ]
    record("init_process_group", missing_variables=missing, torch_initialized_before=dist.is_initialized())
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="env://")
    _default_pg = dist.group.WORLD
