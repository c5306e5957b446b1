"""Helpers for the strategy tests: run the training script the way users do and read what each rank recorded.

Imported by the test modules as ``strategies_helpers`` (conftest puts this directory on ``sys.path``)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import Trainer
from xtrain.core.registry import all_registries
from xtrain.core.testing import RunResult, free_port, leftover_processes, run_processes, torchrun_command

SCRIPTS = Path(__file__).parent / "scripts"
TRAIN = SCRIPTS / "train.py"
TIMEOUT = 150.0


@dataclass
class Run:
    """One finished run: the processes' result and every rank's record."""

    result: RunResult
    out: Path
    records: list[dict[str, Any]]

    def params(self, rank: int = 0) -> dict[str, torch.Tensor]:
        return {k: torch.tensor(v) for k, v in self.records[rank]["params"].items()}


def read_records(out: Path) -> list[dict[str, Any]]:
    records = [json.loads(p.read_text()) for p in out.glob("rank*.json")]
    return sorted(records, key=lambda r: r["rank"])


def launch_commands(settings: dict[str, Any], how: str, nprocs: int) -> tuple[list[list[str]], list[dict[str, str]]]:
    """The commands (and their extra environment) that start ``settings`` as a user would with ``how``."""
    arg = json.dumps(settings)
    if how == "python":
        return [[sys.executable, str(TRAIN), arg]], [{}]
    if how == "torchrun":
        return [torchrun_command(str(TRAIN), arg, nproc_per_node=nprocs)], [{"OMP_NUM_THREADS": "1"}]
    if how == "torchrun_2nodes":
        endpoint = f"127.0.0.1:{free_port()}"
        cmds = [torchrun_command(str(TRAIN), arg, nproc_per_node=nprocs // 2, nnodes=2, rdzv_endpoint=endpoint)
                for _ in range(2)]
        return cmds, [{"OMP_NUM_THREADS": "1"}, {"OMP_NUM_THREADS": "1"}]
    if how == "two_nodes":
        port = str(free_port())
        envs = [{"NODE_RANK": str(n), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port} for n in range(2)]
        return [[sys.executable, str(TRAIN), arg] for _ in range(2)], envs
    if how == "mpirun":
        mpirun = shutil.which("mpirun")
        if mpirun is None:
            pytest.skip("mpirun is not installed (apt-get install openmpi-bin)")
        return [[mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(nprocs), sys.executable, str(TRAIN),
                 arg]], [{}]
    if how == "horovodrun":
        horovodrun = Path(sys.executable).parent / "horovodrun"
        if not horovodrun.exists():
            pytest.skip("horovodrun is not installed (python tools/build_horovod.py)")
        return [[str(horovodrun), "-np", str(nprocs), "-H", f"localhost:{nprocs}", "--gloo", sys.executable,
                 str(TRAIN), arg]], [{}]
    raise ValueError(how)


@pytest.fixture
def train(tmp_path: Path) -> Callable[..., Run]:
    """``train(settings, how="python", nprocs=2, check=True)`` runs the script and returns a :class:`Run`."""
    counter = iter(range(1000))

    def run(settings: dict[str, Any], *, how: str = "python", nprocs: int = 2, check: bool = True,
            timeout: float = TIMEOUT, extra_env: dict[str, str] | None = None) -> Run:
        out = tmp_path / f"run{next(counter)}"
        out.mkdir()
        settings = {"accelerator": "cpu", **settings, "out": str(out)}
        commands, envs = launch_commands(settings, how, nprocs)
        envs = [{**e, **(extra_env or {})} for e in envs]
        result = run_processes(commands, timeout=timeout, envs=envs, cwd=out)
        if check:
            result.check()
        time.sleep(0.2)  # let the kernel reap what the run's last kill just ended
        assert not leftover_processes(result), f"processes outlived the run:\n{result.output}"
        return Run(result, out, read_records(out))

    return run


def assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], tol: float = 1e-6) -> None:
    assert a.keys() == b.keys()
    for key in a:
        diff = (a[key].flatten() - b[key].flatten()).abs().max().item()
        assert diff <= tol, f"{key} differs by {diff}"


@pytest.fixture(autouse=True)
def _refresh_registries(restore_environment: None) -> Iterator[None]:
    """Registries rescanned after each test (some install distributions), within the restored environment."""
    yield
    for registry in all_registries():
        registry.refresh()


def quiet_trainer(**kwargs: Any) -> Trainer:
    """A CPU Trainer without logger, progress bar, checkpointing or summary (for resolution and setup tests)."""
    return Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False,
                   enable_model_summary=False, **kwargs)


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """``monkeypatch`` after removing every cluster variable of the machine running the tests."""
    clear_cluster_variables(monkeypatch)
    return monkeypatch


def clear_cluster_variables(monkeypatch: pytest.MonkeyPatch, keep: Sequence[str] = ()) -> None:
    prefixes = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "LSB_", "JSM_", "TORCHELASTIC_", "MPI_LOCAL", "HOROVOD_")
    for name in list(os.environ):
        cluster = name.startswith(prefixes) or name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                                        "GROUP_RANK", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")
        if cluster and name not in keep:
            monkeypatch.delenv(name)


def horovod_missing() -> str | None:
    """Why Horovod cannot be used here (the skip reason), or ``None`` when ``horovod.torch`` imports."""
    try:
        import horovod.torch  # noqa: F401
    except ImportError as err:
        return f"Horovod is not usable here ({err}); build it with python tools/build_horovod.py (nox -s horovod)"
    return None


def check_failed_fast(run: Run, *, failed_rank: int, how: str, started: float, bound: float = 15.0) -> float:
    """Every rank ended (none hung, none left behind) within ``bound`` seconds of ``failed_rank`` failing, naming it.

    The failing rank wrote the time just before it failed into ``failed_at``; returns how long the others took.
    """
    failed_at = float((run.out / "failed_at").read_text())
    took = time.time() - failed_at
    result = run.result
    assert not result.timed_out, result.output
    assert all(code not in (0, None) for code in result.returncodes), (result.returncodes, result.output)
    assert took <= bound, f"ranks took {took:.1f} s to stop after rank {failed_rank} failed:\n{result.output}"
    assert failed_at >= started
    if how == "raise":
        assert f"RuntimeError: boom from rank {failed_rank}" in result.output, result.output
    # xtrain names the rank as "rank N"; torchrun's agent, which may end the others first, as "local_rank: N".
    assert f"rank {failed_rank}" in result.output or f"local_rank: {failed_rank}" in result.output, result.output
    return took
