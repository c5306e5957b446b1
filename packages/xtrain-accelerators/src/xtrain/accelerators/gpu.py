"""``accelerator="gpu"``: the GPU this machine has, whoever made it.

Users write ``gpu`` on a Linux box with NVIDIA cards and on an Apple silicon Mac alike. The entry point ``gpu`` names
the factory below, not a class, so ``accelerator="auto"`` never sees it twice and the resolved accelerator's name is
the real one (``"cuda"`` or ``"mps"``), which strategies and precisions check against.
"""

from __future__ import annotations

from xtrain.accelerators.cuda import CUDAAccelerator
from xtrain.accelerators.mps import MPSAccelerator
from xtrain.core.accelerator import Accelerator

__all__ = ["gpu_accelerator"]


def gpu_accelerator() -> Accelerator:
    """The MPS accelerator where Apple's GPU is available, else the CUDA accelerator.

    The CUDA accelerator is the answer even without a GPU, so that the validator's error for ``accelerator="gpu"``
    on a machine without one says that CUDA is not available and lists the accelerators that are.
    """
    if MPSAccelerator.is_available():
        return MPSAccelerator()
    return CUDAAccelerator()
