"""The same model trains, to the same weights, however its 2 ranks are started; launchers behave as documented."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from strategies_helpers import SCRIPTS, TRAIN, Run, assert_close
from xtrain.core.testing import leftover_processes, run_processes

SETTINGS: dict[str, Any] = {"max_steps": 6, "batch_size": 8, "shuffle": True}
LAUNCHES = [
    ("ddp", "python", {"strategy": "ddp", "devices": 2}),
    ("ddp_spawn", "python", {"strategy": "ddp_spawn", "devices": 2}),
    ("ddp_fork", "python", {"strategy": "ddp_fork", "devices": 2}),
    ("torchrun --nproc-per-node=2", "torchrun", {"strategy": "ddp", "devices": 2}),
    ("torchrun --nnodes=2", "torchrun_2nodes", {"strategy": "ddp", "devices": 1, "num_nodes": 2}),
    ("num_nodes=2 via the xtrain launcher", "two_nodes", {"strategy": "ddp", "devices": 1, "num_nodes": 2}),
    ("mpirun -np 2", "mpirun", {"strategy": "ddp", "devices": 2}),
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """Weights after training on one process with the 2-rank global batch (sequential data, so it is comparable)."""
    out = tmp_path_factory.mktemp("reference")

    settings = {**SETTINGS, "devices": 1, "batch_size": 16, "shuffle": False, "accelerator": "cpu", "out": str(out)}
    run_processes([[sys.executable, str(TRAIN), json.dumps(settings)]], timeout=120, cwd=out).check()
    record = json.loads((out / "rank0.json").read_text())
    return {k: torch.tensor(v) for k, v in record["params"].items()}


@pytest.mark.parametrize(("label", "how", "hardware"), LAUNCHES, ids=[x[0] for x in LAUNCHES])
def test_same_model_same_weights(train: Callable[..., Run], reference: dict[str, torch.Tensor], label: str,
                                 how: str, hardware: dict[str, Any]) -> None:
    run = train({**SETTINGS, "shuffle": False, **hardware}, how=how)
    assert [r["rank"] for r in run.records] == [0, 1], label
    assert [r["world_size"] for r in run.records] == [2, 2]
    if "num_nodes" in hardware:
        assert [r["node_rank"] for r in run.records] == [0, 1]
    expected_env = {"torchrun": "TorchElasticEnvironment", "torchrun_2nodes": "TorchElasticEnvironment",
                    "mpirun": "MPIEnvironment"}.get(how, "LocalEnvironment")
    assert {r["environment"] for r in run.records} == {expected_env}
    for r in run.records:
        assert_close(run.params(r["rank"]), reference, tol=1e-6)


def test_python_dash_m_and_console_script_are_re_executed(train: Callable[..., Run], tmp_path: Path) -> None:
    """``python -m train`` and an executable script with a shebang (what pip's console scripts are)."""

    for kind in ("module", "console"):
        out = tmp_path / kind
        out.mkdir()
        arg = json.dumps({**SETTINGS, "strategy": "ddp", "devices": 2, "accelerator": "cpu", "out": str(out)})
        if kind == "module":
            command = [sys.executable, "-m", "train", arg]
            cwd = SCRIPTS
        else:
            script = tmp_path / "xtrain-train"
            script.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.path.insert(0, {str(SCRIPTS)!r})\n"
                              f"runpy.run_module('train', run_name='__main__')\n")
            script.chmod(0o755)
            command, cwd = [str(script), arg], out
        result = run_processes([command], timeout=120, cwd=cwd).check()
        assert not leftover_processes(result)
        assert sorted(p.name for p in out.glob("rank*.json")) == ["rank0.json", "rank1.json"], kind


def test_second_fit_under_spawn_continues_from_the_first(train: Callable[..., Run]) -> None:
    """Spawn hands weights, loop progress and metrics back: fit(6) + fit(12) trains as the same two fits in
    processes that stay (the re-exec launcher). The second fit configures new optimizers, as Lightning's does."""
    twice = train({**SETTINGS, "strategy": "ddp_spawn", "devices": 2, "second_fit": True})
    once = train({**SETTINGS, "strategy": "ddp", "devices": 2, "second_fit": True})
    assert (twice.out / "first_fit_step.txt").read_text() == "6"
    assert (twice.out / "second_fit_step.txt").read_text() == "12"
    first = torch.load(twice.out / "first_fit.pt")
    second = torch.load(twice.out / "second_fit.pt")
    assert any((first[k] - second[k]).abs().max() > 0 for k in first), "the second fit did not train"
    assert_close(second, once.params(0), tol=1e-6)
    metrics = (twice.out / "caller_metrics.json").read_text()
    assert "synced_loss" in metrics and "rank_value" in metrics
    shown = json.loads((twice.out / "caller_progress_bar.json").read_text())  # it came back empty under spawn
    assert shown == pytest.approx({"synced_loss": json.loads(metrics)["synced_loss"]})


def test_second_fit_under_the_re_exec_launcher_does_not_relaunch(train: Callable[..., Run]) -> None:
    run = train({**SETTINGS, "strategy": "ddp", "devices": 2, "second_fit": True})
    pids = [(run.out / f"pids_rank{r}.txt").read_text().split() for r in (0, 1)]
    assert len(pids[0]) == len(pids[1]) == 2 and len(set(pids[1])) == 1, pids  # same rank-1 process both fits
    assert not list(run.out.glob("pids_rank2.txt"))
    assert (run.out / "second_fit_step.txt").read_text() == "12"


INTERACTIVE = """
import json, torch
from xtrain.core import Trainer, ConfigError
from xtrain.core.testing import TinyClassifier, tiny_loaders
try:
    Trainer(strategy="ddp", devices=2, accelerator="cpu")
except ConfigError as err:
    print("CONFIG ERROR:", err)

t = Trainer(strategy="ddp_notebook", devices=2, accelerator="cpu", max_steps=3, logger=False,
            enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)

m = TinyClassifier()
t.fit(m, tiny_loaders()[0])
print("NOTEBOOK STEPS", t.global_step, len(m.losses) == 0)

auto = Trainer(devices=2, accelerator="cpu", max_steps=2, logger=False, enable_progress_bar=False,
               enable_model_summary=False, enable_checkpointing=False)
print("AUTO PICKED", auto.strategy.name)
auto.fit(TinyClassifier(), tiny_loaders()[0])
print("AUTO STEPS", auto.global_step)
"""


def test_interactive_session_refuses_ddp_and_runs_ddp_notebook(tmp_path: Path) -> None:
    """A real ``python -i`` fed on stdin: ``ddp`` is refused with the fix, ``ddp_notebook`` trains (fork), and
    ``devices=2`` with the default strategy picks ``ddp_notebook`` there, as Lightning picks its fork strategy."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-i", "-q"], input=INTERACTIVE, text=True, capture_output=True,
                          timeout=120, cwd=tmp_path, env=env, check=False)
    out = proc.stdout + proc.stderr
    assert "CONFIG ERROR: strategy='ddp'" in out and "ddp_notebook" in out, out
    assert "NOTEBOOK STEPS 3 True" in out, out  # trained in forked ranks; the caller got the state back
    assert "AUTO PICKED ddp_notebook" in out and "AUTO STEPS 2" in out, out


def test_code_without_a_file_cannot_be_re_executed(tmp_path: Path) -> None:
    code = ("from xtrain.core import Trainer, ConfigError\n"
            "try:\n    Trainer(strategy='ddp', devices=2, accelerator='cpu')\n"
            "except ConfigError as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code], text=True, capture_output=True, timeout=120, cwd=tmp_path,
                          check=False)
    assert "did not come from a script or module" in proc.stdout and "ddp_spawn" in proc.stdout, proc.stdout
    code = code.replace("strategy='ddp'", "strategy='model_parallel'")
    proc = subprocess.run([sys.executable, "-c", code], text=True, capture_output=True, timeout=120, cwd=tmp_path,
                          check=False)
    # It named strategy='ddp' and offered ddp_spawn, which does not shard the model.
    assert "strategy='model_parallel'" in proc.stdout and "ddp_spawn" not in proc.stdout, proc.stdout


def test_mpirun_is_installed_or_the_mpi_test_says_why() -> None:
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev)")
    assert subprocess.run(["mpirun", "--version"], capture_output=True, check=False).returncode == 0


def test_only_an_error_a_peers_death_can_cause_waits_for_a_childs_exit_code() -> None:
    """Rank 0's own error ended the job 3-7 s late: the launcher waited a second for a child to blame, twice (the
    strategy's on_exception, then the uncaught exception's hook), before the interpreter's final collection."""
    import torch.distributed as dist

    from xtrain.strategies.launchers.subprocess_script import _may_be_a_peers_death

    assert not _may_be_a_peers_death(ValueError("a bug in training_step"))
    assert not _may_be_a_peers_death(KeyError("loss"))
    assert _may_be_a_peers_death(RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer"))
    assert _may_be_a_peers_death(dist.DistBackendError("NCCL communicator was aborted"))
    try:
        try:
            raise ConnectionResetError("reset")
        except ConnectionResetError as cause:
            raise RuntimeError("the all-reduce failed") from cause
    except RuntimeError as chained:
        assert _may_be_a_peers_death(chained)
