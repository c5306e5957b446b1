"""xtrain-accelerators: CUDA (alias ``gpu``), Apple MPS, Intel XPU and XLA/TPU for xtrain, plus the XLA strategies.

Nothing here is imported by name: xtrain finds these accelerators and strategies through the entry points this
distribution declares (``xtrain.accelerators``, ``xtrain.strategies``). Importing this package checks that the
installed xtrain-core is one this release works with, and imports no backend library (``torch_xla`` is imported only
when an XLA device is used).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from xtrain.accelerators.__about__ import __version__
from xtrain.core.compat import require_core

require_core("xtrain-accelerators", __version__, minimum="1.0", below="2")

if TYPE_CHECKING:
    from xtrain.accelerators.cuda import CUDAAccelerator
    from xtrain.accelerators.mps import MPSAccelerator
    from xtrain.accelerators.xla import XLAAccelerator
    from xtrain.accelerators.xpu import XPUAccelerator

__all__ = ["CUDAAccelerator", "MPSAccelerator", "XLAAccelerator", "XPUAccelerator", "__version__"]

_WHERE = {"CUDAAccelerator": "cuda", "MPSAccelerator": "mps", "XLAAccelerator": "xla", "XPUAccelerator": "xpu"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'xtrain.accelerators' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"xtrain.accelerators.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
