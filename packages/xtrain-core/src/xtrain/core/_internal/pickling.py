"""Python objects as byte tensors, for collectives that carry objects.

``torch.distributed``'s own object collectives decode through NumPy, which torch's CPU wheel does not install, so a
user with only ``xtrain-core`` and ``xtrain-strategies`` would fail at the first checkpoint. These need only torch.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

import torch

__all__ = ["object_to_tensor", "tensor_to_object"]


def object_to_tensor(obj: Any, device: torch.device) -> torch.Tensor:
    """Pickle ``obj`` into a 1-D uint8 tensor on ``device``."""
    data = bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    return torch.frombuffer(data, dtype=torch.uint8).to(device)


def tensor_to_object(tensor: torch.Tensor) -> Any:
    """Unpickle a tensor made by :func:`object_to_tensor` (and possibly padded after its end)."""
    cpu = tensor.detach().to("cpu", torch.uint8).contiguous()
    data = cpu.numpy().tobytes() if "numpy" in sys.modules else bytes(cpu.tolist())
    return pickle.loads(data)  # only bytes our own ranks of this job sent
