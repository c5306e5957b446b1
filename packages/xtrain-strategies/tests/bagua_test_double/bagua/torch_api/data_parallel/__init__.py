"""TEST DOUBLE of ``bagua.torch_api.data_parallel``: ``DistributedDataParallel`` is torch's DDP on gloo plus the
attributes Bagua's wrapper has (``bagua_algorithm``, ``bagua_optimizers``, ``inner``). Real Bagua runs the chosen
algorithm; this double always averages gradients, which is what gradient_allreduce does."""

from typing import Any

import torch

from bagua.torch_api._record import record
from bagua.torch_api.algorithms.base import AlgorithmImpl


def DistributedDataParallel(module: torch.nn.Module, device_ids: Any = None, output_device: Any = None, dim: int = 0,
                            broadcast_buffers: bool = True, process_group: Any = None, bucket_cap_mb: int = 25,
                            find_unused_parameters: bool = False, check_reduction: bool = False,
                            gradient_as_bucket_view: bool = True, optimizers: Any = (),
                            algorithm: Any = None) -> Any:
    record("DistributedDataParallel", module=type(module).__name__, optimizers=[type(o).__name__ for o in optimizers],
           algorithm=type(algorithm).__name__, gradient_as_bucket_view=gradient_as_bucket_view)
    wrapped = torch.nn.parallel.DistributedDataParallel(module, gradient_as_bucket_view=gradient_as_bucket_view)
    wrapped.bagua_algorithm = AlgorithmImpl(algorithm)
    wrapped.bagua_optimizers = list(optimizers)
    wrapped.inner = wrapped
    return wrapped
