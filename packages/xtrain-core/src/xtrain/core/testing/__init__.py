"""Testing tools for xtrain and its plugins: the conformance kit, a multi-process launcher, tiny models."""

from xtrain.core.testing.conformance import (
    AcceleratorConformance,
    CheckpointIOConformance,
    ClusterEnvironmentConformance,
    PrecisionConformance,
    StrategyConformance,
    run_probe,
)
from xtrain.core.testing.doubles import installed_distribution, simulate_devices
from xtrain.core.testing.models import TinyClassifier, TinyData, tiny_dataset, tiny_loaders
from xtrain.core.testing.processes import (
    ProcessResult,
    RunResult,
    free_port,
    leftover_processes,
    python_command,
    run_processes,
    torchrun_command,
)

__all__ = [
    "AcceleratorConformance", "CheckpointIOConformance", "ClusterEnvironmentConformance", "PrecisionConformance", "ProcessResult", "RunResult",
    "StrategyConformance", "TinyClassifier", "TinyData", "free_port", "installed_distribution", "leftover_processes",
    "python_command", "run_probe", "run_processes", "simulate_devices", "tiny_dataset", "tiny_loaders",
    "torchrun_command",
]
