"""Processes started by SLURM's ``srun``."""

from __future__ import annotations

import os
import re
from typing import ClassVar

from typing_extensions import override

from xtrain.core.environment import ClusterEnvironment
from xtrain.core.errors import ConfigError
from xtrain.strategies.environments._common import check_layout, env_int, port_from

__all__ = ["SLURMEnvironment", "expand_hostlist"]

_INTERACTIVE_NAMES = ("bash", "interactive")


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand SLURM's compressed host list: ``"gpu[01-03,07],login1"`` -> ``["gpu01", "gpu02", "gpu03", ...]``."""
    hosts: list[str] = []
    for match in re.finditer(r"([^,\[]+)(\[([^\]]*)\])?([^,]*)", hostlist):
        prefix, _, ranges, suffix = match.groups()
        if not prefix:
            continue
        if ranges is None:
            hosts.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            if not high:
                hosts.append(f"{prefix}{low}{suffix}")
                continue
            for number in range(int(low), int(high) + 1):
                hosts.append(f"{prefix}{number:0{len(low)}d}{suffix}")
    return hosts


def _per_node(value: str) -> int:
    """``SLURM_NTASKS_PER_NODE`` / ``SLURM_TASKS_PER_NODE`` look like ``"2"`` or ``"2(x3)"`` or ``"2(x2),1"``."""
    return int(re.match(r"\d+", value.strip()).group(0))  # type: ignore[union-attr]


def _step_tasks() -> int:
    """Tasks of the srun step this process belongs to (0 outside a step)."""
    if "SLURM_STEP_ID" not in os.environ:
        return 0
    raw = os.environ.get("SLURM_STEP_NUM_TASKS") or os.environ.get("SLURM_NTASKS") or "0"
    return int(raw) if raw.isdigit() else 0


def _task_int(name: str) -> int:
    if os.environ.get(name) in (None, ""):
        raise _not_a_task(name)
    return env_int(name)


def _not_a_task(name: str) -> ConfigError:
    """A process inside a SLURM job that srun did not start as one of its tasks (the batch script, an salloc shell)."""
    job, tasks = os.environ.get("SLURM_JOB_ID", "?"), os.environ.get("SLURM_NTASKS", "?")
    return ConfigError("plugins", "slurm", f"found SLURM job {job} with SLURM_NTASKS={tasks}, but {name} is not set: "
                       f"this process was not started by srun (it is the batch script itself, or a shell of salloc), "
                       f"so the job's tasks would never meet.",
                       fix="start the script with srun in the batch script (srun python train.py ...); or, to have "
                           "xtrain start the processes itself in this allocation, name the job 'interactive' "
                           "(--job-name=interactive), which turns SLURM's detection off.")


class SLURMEnvironment(ClusterEnvironment):
    """Ranks from ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NODEID`` and ``SLURM_NTASKS``.

    Detected when a job step runs under ``srun`` (``SLURM_NTASKS`` is set and the job is not an interactive
    ``bash``/``interactive`` allocation). The rendezvous host is the first node of the job, the port is derived
    from the job id unless ``MASTER_ADDR``/``MASTER_PORT`` are set.
    """

    name: ClassVar[str] = "slurm"
    detect_priority: ClassVar[int | None] = 30

    @classmethod
    @override
    def detect(cls) -> bool:
        if "SLURM_NTASKS" not in os.environ:
            return False
        # In an interactive allocation you start the ranks yourself, unless srun started several tasks of one step
        # (`salloc`, then `srun python train.py`): each would otherwise launch a run of its own.
        return os.environ.get("SLURM_JOB_NAME") not in _INTERACTIVE_NAMES or _step_tasks() > 1

    @property
    @override
    def creates_processes_externally(self) -> bool:
        return True

    @property
    @override
    def main_address(self) -> str:
        if "MASTER_ADDR" in os.environ:
            return os.environ["MASTER_ADDR"]
        nodes = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST") or "127.0.0.1"
        return expand_hostlist(nodes)[0]

    @property
    @override
    def main_port(self) -> int:
        if "MASTER_PORT" in os.environ:
            return int(os.environ["MASTER_PORT"])
        return port_from(f"slurm-{os.environ.get('SLURM_JOB_ID', '0')}-{os.environ.get('SLURM_STEP_ID', '0')}")

    @override
    def world_size(self) -> int:
        return env_int("SLURM_NTASKS")

    @override
    def global_rank(self) -> int:
        return _task_int("SLURM_PROCID")

    @override
    def local_rank(self) -> int:
        return _task_int("SLURM_LOCALID")

    @override
    def node_rank(self) -> int:
        return _task_int("SLURM_NODEID")

    @override
    def validate_settings(self, *, num_devices: int, num_nodes: int) -> None:
        if self.world_size() > 1 and "SLURM_STEP_ID" not in os.environ:  # the batch script itself: nobody would join
            raise _not_a_task("SLURM_STEP_ID")
        nodes = env_int("SLURM_NNODES", "SLURM_JOB_NUM_NODES", default=1)
        raw = os.environ.get("SLURM_NTASKS_PER_NODE") or os.environ.get("SLURM_TASKS_PER_NODE")
        per_node = _per_node(raw) if raw else max(self.world_size() // nodes, 1)
        check_layout(who="SLURM", per_node=per_node, nodes=nodes, num_devices=num_devices, num_nodes=num_nodes,
                     per_node_flag="--ntasks-per-node", nodes_flag="--nodes")
