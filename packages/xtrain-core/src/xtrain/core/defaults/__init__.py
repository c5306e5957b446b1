"""The plugins xtrain-core embeds so that ``pip install xtrain-core`` alone trains on CPU.

They are registered through the same entry points as any third-party plugin.
"""

from xtrain.core.defaults.async_io import AsyncCheckpointIO
from xtrain.core.defaults.cpu import CPUAccelerator
from xtrain.core.defaults.local import LocalEnvironment
from xtrain.core.defaults.single_device import SingleDeviceStrategy
from xtrain.core.defaults.single_precision import SinglePrecision
from xtrain.core.defaults.torch_io import TorchCheckpointIO

__all__ = ["AsyncCheckpointIO", "CPUAccelerator", "LocalEnvironment", "SingleDeviceStrategy", "SinglePrecision", "TorchCheckpointIO"]
