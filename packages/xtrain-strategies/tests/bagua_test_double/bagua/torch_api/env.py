"""TEST DOUBLE of ``bagua.torch_api.env``: ranks from the variables Bagua reads (RANK, WORLD_SIZE, ...)."""

import os


def get_rank() -> int:
    return int(os.environ.get("RANK", 0))


def get_world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", 1))


def get_local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", 0))


def get_local_size() -> int:
    return int(os.environ.get("LOCAL_WORLD_SIZE", 1))
