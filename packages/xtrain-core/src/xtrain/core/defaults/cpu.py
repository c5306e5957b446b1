"""The CPU accelerator."""

from __future__ import annotations

import os
import warnings
from typing import ClassVar

import torch
from typing_extensions import override

from xtrain.core._internal.user_warning import warn_at_user
from xtrain.core.accelerator import Accelerator, DevicesArg

__all__ = ["CPUAccelerator"]


class CPUAccelerator(Accelerator):
    """The CPU: always available; ``devices=N`` starts N processes (with a warning when there are fewer cores)."""

    name: ClassVar[str] = "cpu"
    device_type: ClassVar[str] = "cpu"
    dist_backend: ClassVar[str | None] = "gloo"
    autocast_device_type: ClassVar[str] = "cpu"
    auto_priority: ClassVar[int] = 0
    device_index_limit: ClassVar[bool] = False

    @classmethod
    @override
    def is_available(cls) -> bool:
        return True

    @classmethod
    @override
    def device_count(cls) -> int:
        return os.cpu_count() or 1

    @classmethod
    @override
    def auto_device_count(cls) -> int:
        return 1

    @classmethod
    @override
    def parse_devices(cls, devices: DevicesArg) -> list[int]:
        indices = super().parse_devices(devices)
        if sorted(indices) != list(range(len(indices))) and os.environ.get("LOCAL_RANK", "0") == "0":
            # Parsed as on every accelerator, but a CPU process has no index: "2," would silently be one process.
            warn_at_user(f"devices={devices!r} on accelerator='cpu' names device index(es) {indices}; CPU processes "
                         f"have no indices, so this starts {len(indices)} process(es). Fix: write devices="
                         f"{len(indices)} to say so, or devices=N for N processes.", UserWarning)
        cores = _usable_cores()
        # Under torchrun or mpirun the launcher started the processes already (and a count that differs from its
        # own is an error elsewhere); this process then starts none.
        started = any(name in os.environ for name in ("LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"))
        if len(indices) > cores and not started:
            warnings.warn(f"devices={devices!r} on accelerator='cpu' starts {len(indices)} processes, but this "
                          f"machine lets this program use {cores} CPU core(s): the processes will compete for them "
                          f"and every step gets slower, not faster. Fix: devices={cores} or fewer (devices=-1 takes "
                          f"one per core).", UserWarning, stacklevel=4)
        return indices

    @override
    def get_device(self, index: int) -> torch.device:
        return torch.device("cpu")

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        try:
            import resource
        except ImportError:  # pragma: no cover - not on Windows
            return {}
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {"cpu_max_rss_mb": usage.ru_maxrss / 1024.0, "cpu_user_time_s": usage.ru_utime}


def _usable_cores() -> int:
    """The cores this process may run on (a container or ``taskset`` may allow fewer than the machine has)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
