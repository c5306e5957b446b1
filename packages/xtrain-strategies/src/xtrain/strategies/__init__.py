"""xtrain-strategies: the DDP family, DP, DDP2, FSDP, their launchers and the cluster environments.

Everything here is found by name through entry points (``Trainer(strategy="ddp")``, ``plugins=["slurm"]``); the
classes are importable for users who want to pass options. Names are imported on first use, so importing this
package costs nothing beyond the core version check.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from xtrain.core.compat import require_core
from xtrain.strategies.__about__ import __version__

require_core("xtrain-strategies", __version__, minimum="1.0", below="2")

if TYPE_CHECKING:
    from xtrain.strategies.ddp import DDPForkStrategy, DDPNotebookStrategy, DDPSpawnStrategy, DDPStrategy
    from xtrain.strategies.ddp2 import DDP2Strategy
    from xtrain.strategies.dp import DataParallelStrategy
    from xtrain.strategies.environments import (
        KubeflowEnvironment,
        LSFEnvironment,
        MPIEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )
    from xtrain.strategies.fsdp import FSDPStrategy
    from xtrain.strategies.launchers import MultiprocessingLauncher, SubprocessScriptLauncher

__all__ = [
    "DDP2Strategy", "DDPForkStrategy", "DDPNotebookStrategy", "DDPSpawnStrategy", "DDPStrategy",
    "DataParallelStrategy", "FSDPStrategy", "KubeflowEnvironment", "LSFEnvironment", "MPIEnvironment", "MultiprocessingLauncher",
    "SLURMEnvironment", "SubprocessScriptLauncher", "TorchElasticEnvironment", "__version__",
]

_WHERE = {
    "DDPStrategy": "ddp", "DDPSpawnStrategy": "ddp", "DDPForkStrategy": "ddp", "DDPNotebookStrategy": "ddp",
    "DDP2Strategy": "ddp2", "DataParallelStrategy": "dp", "FSDPStrategy": "fsdp",
    "KubeflowEnvironment": "environments", "LSFEnvironment": "environments", "MPIEnvironment": "environments",
    "SLURMEnvironment": "environments", "TorchElasticEnvironment": "environments",
    "MultiprocessingLauncher": "launchers", "SubprocessScriptLauncher": "launchers",
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
