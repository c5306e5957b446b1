"""The conformance kit for cluster environments (see :mod:`.conformance`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest

from xtrain.core.environment import ClusterEnvironment
from xtrain.core.registry import ENVIRONMENTS, STRATEGIES
from xtrain.core.testing._check import check, check_declared_data
from xtrain.core.testing.processes import free_port, python_command, run_processes

__all__ = ["ClusterEnvironmentConformance"]


class ClusterEnvironmentConformance:
    """Checks a ClusterEnvironment: declared data, registration, detection and ranks, and a real 2-process run.

    Attributes:
        environment: The class under test (required).
        registered_name: The entry-point name, when it differs from ``environment.name``.
        launch_strategy: The multi-process strategy of the real run (it needs ``xtrain-strategies`` for ``"ddp"``).

    Implement :meth:`rank_variables` to say how your cluster describes a process to it; without it, only the
    declared data and registration are checked.
    """

    environment: ClassVar[type[ClusterEnvironment]]
    registered_name: ClassVar[str | None] = None
    launch_strategy: ClassVar[str] = "ddp"

    def rank_variables(self, *, rank: int, world_size: int, port: int) -> dict[str, str]:
        """The environment variables your cluster sets in process ``rank`` of a ``world_size``-process job on one
        node, with its rendezvous on ``127.0.0.1:port``."""
        raise NotImplementedError

    def _variables(self, rank: int, world_size: int, port: int) -> dict[str, str]:
        try:
            return self.rank_variables(rank=rank, world_size=world_size, port=port)
        except NotImplementedError:
            pytest.skip("rank_variables() is not implemented: the kit cannot play your cluster")

    def test_declares_capabilities_as_data(self) -> None:
        env = self.environment
        check_declared_data("xtrain.environments", env, "ClusterEnvironment")
        check(isinstance(env.detect(), bool), "ClusterEnvironment.detect() returns a bool", "True or False",
              repr(env.detect()))

    def test_is_registered_by_name(self) -> None:
        name = self.registered_name or self.environment.name
        check(name in ENVIRONMENTS, "registered in the 'xtrain.environments' entry-point group",
              f"an entry point named {name!r}", f"registered names: {ENVIRONMENTS.names()}")

    def test_reads_ranks_from_the_cluster(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for key, value in self._variables(1, 2, 29400).items():
            monkeypatch.setenv(key, value)
        env = self.environment()
        if self.environment.detect_priority is not None:
            check(self.environment.detect(), "detect() is True inside the cluster's processes", "True", "False")
        env.set_world_size(2)
        env.set_global_rank(1)
        seen = (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank())
        check(seen == (2, 1, 1, 0), "ranks come from the cluster's variables",
              "(world_size, global_rank, local_rank, node_rank) == (2, 1, 1, 0) for rank 1 of 2", seen)
        check(env.creates_processes_externally, "creates_processes_externally is True when the cluster started them",
              "True (no launcher must start more)", env.creates_processes_externally)
        check((env.main_address, env.main_port) == ("127.0.0.1", 29400), "the rendezvous comes from the cluster",
              ("127.0.0.1", 29400), (env.main_address, env.main_port))

    def test_trains_in_processes_the_cluster_started(self, tmp_path: Path) -> None:
        if self.launch_strategy not in STRATEGIES:
            pytest.skip(f"strategy {self.launch_strategy!r} is not installed")
        port = free_port()
        name = self.registered_name or self.environment.name
        settings = json.dumps({"strategy": self.launch_strategy, "devices": 2, "plugins": [name], "max_steps": 4})
        commands = [python_command("-m", "xtrain.core.testing._probe", settings, str(tmp_path)) for _ in range(2)]
        result = run_processes(commands, envs=[self._variables(r, 2, port) for r in range(2)], timeout=120,
                               cwd=tmp_path)
        check(not result.timed_out and result.returncodes == [0, 0], "two processes started by the cluster train",
              "exit codes [0, 0]", f"{result.returncodes}, timed out: {result.timed_out}\n{result.output}")
        records = sorted((json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")), key=lambda r: r["rank"])
        check([(r["rank"], r["world_size"]) for r in records] == [(0, 2), (1, 2)],
              "each process gets its rank and the world size from the environment", [(0, 2), (1, 2)],
              [(r["rank"], r["world_size"]) for r in records])
