"""TEST DOUBLE of ``bagua.torch_api`` (Bagua 0.9): NOT Bagua; see ``bagua/__init__.py``."""

from bagua.torch_api import algorithms, communication, data_parallel
from bagua.torch_api.communication import init_process_group
from bagua.torch_api.env import get_local_rank, get_local_size, get_rank, get_world_size

__all__ = ["algorithms", "communication", "data_parallel", "get_local_rank", "get_local_size", "get_rank",
           "get_world_size", "init_process_group"]
