"""Exact resume after SIGKILL, and preemption by SIGTERM / SLURM's SIGUSR1, with real processes and signals."""

from __future__ import annotations

import csv
import os
import signal
import stat
from pathlib import Path

import pytest
import torch

from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import python_command, run_processes

SCRIPT = str(Path(__file__).parent / "scripts" / "resume_run.py")


def train(tmp_path: Path, name: str, *args: str, env: dict[str, str] | None = None) -> tuple[int | None, str]:
    result = run_processes([python_command(SCRIPT, str(tmp_path / name), str(tmp_path / f"{name}.pt"), *args)],
                           timeout=240, envs=[env or {}], cwd=tmp_path)
    return result.returncodes[0], result.output


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def assert_bitwise_equal(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), f"{key} differs"


# (strategy, devices, kill step, step of the last checkpoint, batches of its epoch consumed, total steps).
# One process: 16 batches per epoch, 48 steps; killed at step 23 (epoch 1, batch 7), last checkpoint at step 20
# (epoch 1, batch 4). DDP: 8 batches per rank per epoch, 24 steps; killed at 13 (epoch 1, batch 5), checkpoint at 10.
RESUME_CASES = [("auto", 1, 23, 20, 4, 48), ("ddp", 2, 13, 10, 2, 24)]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(("strategy", "devices", "kill_at", "saved_at", "in_epoch", "total"), RESUME_CASES,
                         ids=["single-device", "ddp-2-processes"])
def test_sigkill_mid_epoch_then_resume_is_bitwise_equal(tmp_path: Path, workers: int, strategy: str, devices: int,
                                                         kill_at: int, saved_at: int, in_epoch: int,
                                                         total: int) -> None:
    if strategy == "ddp" and "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")
    common = ["--workers", str(workers), "--strategy", strategy, "--devices", str(devices)]
    code, out = train(tmp_path, "full", *common)
    assert code == 0, out
    # Steps after the last checkpoint were done and lost: the resumed run must redo them identically.
    code, out = train(tmp_path, "part", *common, "--kill-at", str(kill_at))
    assert code == -signal.SIGKILL, out
    assert not (tmp_path / "part.pt").exists()
    last = torch.load(tmp_path / "part" / "xtrain_logs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["loops"]["global_step"] == saved_at and last["loops"]["batches_in_epoch"] == in_epoch
    assert len(last["rng"]) == devices, "every rank's RNG state is in the checkpoint"
    code, out = train(tmp_path, "part", *common, "--resume")
    assert code == 0, out
    assert f"finished at epoch 3 step {total}" in out
    assert_bitwise_equal(tmp_path / "full.pt", tmp_path / "part.pt")
    assert not (tmp_path / "part" / "xtrain_logs" / "version_1").exists(), "the resumed run must log into version_0"


@pytest.mark.slow
@pytest.mark.parametrize("signal_at", [13, 16], ids=["mid-epoch", "last-step-of-epoch"])
def test_sigterm_saves_at_the_next_safe_point_and_resumes_exactly(tmp_path: Path, signal_at: int) -> None:
    code, out = train(tmp_path, "full")
    assert code == 0, out
    code, out = train(tmp_path, "part", "--signal-at", str(signal_at), "--signal", "TERM")
    assert code == 143, out  # SIGTERMException: the script stops there, a scheduler sees 128 + SIGTERM
    assert "finished at" not in out, out
    # At an epoch's last step the epoch-end save point follows at once: still one save (under SLURM, one requeue).
    assert out.count("preemption signal (SIGTERM) received") == 1 and f"at step {signal_at}" in out, out
    code, out = train(tmp_path, "part", "--resume")
    assert code == 0, out
    assert_bitwise_equal(tmp_path / "full.pt", tmp_path / "part.pt")


@pytest.mark.slow
def test_resume_from_an_epoch_end_with_persistent_workers_is_bitwise_equal(tmp_path: Path) -> None:
    """The uninterrupted run reuses its persistent workers at the next epoch; the resumed one starts them, which
    draws their base seed from the global generator: that draw must not move the epoch's order (found by an
    outside trial: other weights, dropout or not)."""
    common = ["--workers", "2", "--every", "0"]  # persistent workers; checkpoints at epoch ends only
    code, out = train(tmp_path, "full", *common)
    assert code == 0, out
    code, out = train(tmp_path, "part", *common, "--kill-at", "20")
    assert code == -signal.SIGKILL, out
    last = torch.load(tmp_path / "part" / "xtrain_logs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["loops"]["global_step"] == 16 and last["loops"]["batches_in_epoch"] == 0
    code, out = train(tmp_path, "part", *common, "--resume")
    assert code == 0, out
    assert_bitwise_equal(tmp_path / "full.pt", tmp_path / "part.pt")


@pytest.mark.slow
def test_slurm_sigusr1_saves_and_requeues(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"  # a test double: SLURM itself cannot run here
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path / 'scontrol.args'}\n")
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IEXEC)
    env = {"SLURM_JOB_ID": "4242", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    code, out = train(tmp_path, "part", "--signal-at", "7", "--signal", "USR1", env=env)
    assert code == 143, out  # fit raises SIGTERMException after the requeue: the script does not go on
    assert (tmp_path / "scontrol.args").read_text().split() == ["requeue", "4242"]
    assert "SLURM job 4242 requeued" in out


@pytest.mark.slow
def test_slurm_sigusr1_reaching_rank_1_alone_still_requeues(tmp_path: Path) -> None:
    """SLURM's warning may reach a node's tasks at different times (or a user signals one task): every rank saves at
    the same point, and the job is requeued whichever rank got the warning (rank 0 asks for it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"  # a test double: SLURM itself cannot run in this session (see test_slurm.py)
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path / 'scontrol.args'}\n")
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IEXEC)
    env = {"SLURM_JOB_ID": "4343", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    code, out = train(tmp_path, "part", "--signal-at", "7", "--signal", "USR1", "--signal-rank", "1",
                      "--strategy", "ddp", "--devices", "2", env=env)
    assert code == 143, out
    assert (tmp_path / "scontrol.args").read_text().split() == ["requeue", "4343"], out
    assert "preemption signal (SLURM's SIGUSR1 warning) received" in out and "SLURM job 4343 requeued" in out


@pytest.mark.slow
def test_resumed_logs_do_not_duplicate_steps(tmp_path: Path) -> None:
    code, out = train(tmp_path, "part", "--kill-at", "23")
    assert code == -signal.SIGKILL, out
    code, out = train(tmp_path, "part", "--resume")
    assert code == 0, out
    version = tmp_path / "part" / "xtrain_logs" / "version_0"
    if (version / "metrics.csv").exists():
        rows = list(csv.DictReader((version / "metrics.csv").open()))
        steps = [int(r["step"]) for r in rows if r.get("train_loss")]
        assert steps == sorted(set(steps)) == list(range(48))
    else:
        event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
        acc = event_accumulator.EventAccumulator(str(version))
        acc.Reload()
        steps = [e.step for e in acc.Scalars("train_loss")]
        assert steps == list(range(48))
