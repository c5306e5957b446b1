"""xtrain-strategies: the DDP family, DP, DDP2, FSDP, Horovod, Bagua and its algorithms, launchers, environments.

Everything here is found by name through entry points (``Trainer(strategy="ddp")``, ``plugins=["slurm"]``); the
classes are importable for users who want to pass options. Names are imported on first use, so importing this
package costs nothing beyond the core version check (and never imports horovod or bagua).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from xtrain.core.compat import require_core
from xtrain.strategies.__about__ import __version__

require_core("xtrain-strategies", __version__, minimum="1.0", below="2")

if TYPE_CHECKING:
    from xtrain.strategies.async_averaging import AsyncModelAveragingStrategy
    from xtrain.strategies.averaging import DecentralizedStrategy, LocalSGDStrategy
    from xtrain.strategies.bagua import BaguaStrategy
    from xtrain.strategies.compression import (
        CompressedDDPStrategy,
        DDPBf16CompressStrategy,
        DDPFp16CompressStrategy,
        DDPInt8CompressStrategy,
    )
    from xtrain.strategies.ddp import DDPForkStrategy, DDPNotebookStrategy, DDPSpawnStrategy, DDPStrategy
    from xtrain.strategies.ddp2 import DDP2Strategy
    from xtrain.strategies.dp import DataParallelStrategy
    from xtrain.strategies.environments import (
        HorovodEnvironment,
        KubeflowEnvironment,
        LSFEnvironment,
        MPIEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )
    from xtrain.strategies.fsdp import FSDPStrategy
    from xtrain.strategies.horovod import HorovodStrategy
    from xtrain.strategies.launchers import HorovodLauncher, MultiprocessingLauncher, SubprocessScriptLauncher
    from xtrain.strategies.model_parallel import ModelParallelStrategy

__all__ = [
    "AsyncModelAveragingStrategy", "BaguaStrategy", "CompressedDDPStrategy", "DDP2Strategy", "DDPBf16CompressStrategy",
    "DDPForkStrategy", "DDPFp16CompressStrategy", "DDPInt8CompressStrategy", "DDPNotebookStrategy", "DDPSpawnStrategy",
    "DDPStrategy", "DataParallelStrategy", "DecentralizedStrategy", "FSDPStrategy", "HorovodEnvironment",
    "HorovodLauncher", "HorovodStrategy", "KubeflowEnvironment", "LSFEnvironment", "LocalSGDStrategy", "MPIEnvironment",
    "ModelParallelStrategy", "MultiprocessingLauncher", "SLURMEnvironment", "SubprocessScriptLauncher",
    "TorchElasticEnvironment", "__version__",
]

_WHERE = {
    "DDPStrategy": "ddp", "DDPSpawnStrategy": "ddp", "DDPForkStrategy": "ddp", "DDPNotebookStrategy": "ddp",
    "DDP2Strategy": "ddp2", "DataParallelStrategy": "dp", "FSDPStrategy": "fsdp",
    "ModelParallelStrategy": "model_parallel",
    "KubeflowEnvironment": "environments", "LSFEnvironment": "environments", "MPIEnvironment": "environments",
    "SLURMEnvironment": "environments", "TorchElasticEnvironment": "environments",
    "MultiprocessingLauncher": "launchers", "SubprocessScriptLauncher": "launchers",
    "HorovodStrategy": "horovod", "HorovodEnvironment": "environments", "HorovodLauncher": "launchers",
    "BaguaStrategy": "bagua", "CompressedDDPStrategy": "compression", "DDPFp16CompressStrategy": "compression",
    "DDPBf16CompressStrategy": "compression", "DDPInt8CompressStrategy": "compression",
    "LocalSGDStrategy": "averaging", "DecentralizedStrategy": "averaging",
    "AsyncModelAveragingStrategy": "async_averaging",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'xtrain.strategies' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"xtrain.strategies.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
