"""Which preemption signals are caught during a fit, and what a late one does after it (under SLURM)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from xtrain.core import Callback, CSVLogger, SIGTERMException, Trainer, TrainModule
from xtrain.core._internal.preemption import Preemption, _requeue
from xtrain.core.checkpoint_reader import read_checkpoint
from xtrain.core.testing import TinyClassifier, tiny_loaders


@pytest.fixture
def usr1_default() -> Iterator[None]:
    previous = signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGUSR1, previous)


def test_under_slurm_a_usr1_after_the_fit_is_ignored_not_fatal(monkeypatch: pytest.MonkeyPatch,
                                                                usr1_default: None) -> None:
    # SLURM's --signal=USR1@N may arrive after training ended; the default action would kill a finished job.
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    preemption = Preemption()
    with preemption.installed():
        assert signal.getsignal(signal.SIGUSR1) == preemption._handler
        signal.raise_signal(signal.SIGUSR1)
        assert preemption.requested and preemption.signal_number == signal.SIGUSR1
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN
    signal.raise_signal(signal.SIGUSR1)  # would end this process with the default action


def test_outside_slurm_usr1_is_left_alone(monkeypatch: pytest.MonkeyPatch, usr1_default: None) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with Preemption().installed():
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_a_handler_of_the_user_is_restored_after_the_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    seen: list[int] = []

    def mine(signum: int, frame: object) -> None:
        seen.append(signum)

    previous = signal.signal(signal.SIGUSR1, mine)
    try:
        with Preemption().installed():
            pass
        assert signal.getsignal(signal.SIGUSR1) is mine
        signal.raise_signal(signal.SIGUSR1)
        assert seen == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)


class _Recorder(Callback):
    """Signals this process at a training step (or in the sanity check) and records the hooks that follow."""

    def __init__(self, *, at_step: int | None = None, in_sanity: bool = False) -> None:
        self.at_step, self.in_sanity = at_step, in_sanity
        self.calls: list[str] = []

    def on_sanity_check_start(self, trainer: Trainer, module: TrainModule) -> None:
        if self.in_sanity:
            signal.raise_signal(signal.SIGTERM)

    def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if trainer.global_step == self.at_step:
            signal.raise_signal(signal.SIGTERM)

    def on_train_end(self, trainer: Trainer, module: TrainModule) -> None:
        self.calls.append("on_train_end")

    def on_exception(self, trainer: Trainer, module: TrainModule, exception: BaseException) -> None:
        self.calls.append(f"on_exception:{type(exception).__name__}")

    def teardown(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        self.calls.append("teardown")


def test_sigterm_saves_then_fit_raises_sigterm_exception(tmp_path: Path) -> None:
    """As Lightning's SIGTERMException (a SystemExit with code 143): the script does not go on to test or export a
    preempted run as a finished one, and a scheduler sees 143, not a completed job's 0. xtrain saves last.ckpt
    first, at the next save point; on_exception sees the exception, on_train_end is not called."""
    recorder = _Recorder(at_step=3)
    train, val = tiny_loaders()
    trainer = Trainer(max_epochs=5, default_root_dir=tmp_path, enable_progress_bar=False, callbacks=[recorder])
    with pytest.raises(SIGTERMException) as info:
        trainer.fit(TinyClassifier(), train, val)
    assert info.value.code == 143 and isinstance(info.value, SystemExit)
    assert recorder.calls == ["on_exception:SIGTERMException", "teardown"]
    assert trainer.received_sigterm and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert trainer.checkpoint_callback is not None
    last = read_checkpoint(trainer.checkpoint_callback.last_model_path)
    assert last["global_step"] == trainer.global_step and 3 <= trainer.global_step <= 4
    resumed = Trainer(max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False)
    resumed.fit(TinyClassifier(), train, val, ckpt_path="last")  # a later fit in this process is not preempted
    assert not resumed.received_sigterm


def test_a_restarting_launcher_reads_a_preemption_not_an_unknown_failure(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Under xtrain's supervisor (max_restarts) a preempted rank's exit 143 read "no Python error recorded" and the
    summary named whichever rank exited first (found by an outside trial killing jobs at random)."""
    from xtrain.core.restarts import read_failure

    monkeypatch.setenv("XTRAIN_FAILURE_DIR", str(tmp_path / "failures"))
    (tmp_path / "failures").mkdir()
    train, val = tiny_loaders()
    trainer = Trainer(max_epochs=5, default_root_dir=tmp_path, enable_progress_bar=False, logger=False,
                      callbacks=[_Recorder(at_step=3)])
    with pytest.raises(SIGTERMException):
        trainer.fit(TinyClassifier(), train, val)
    record = read_failure(tmp_path / "failures", 0)
    assert record is not None and record.step == trainer.global_step
    assert record.error == (f"preempted: a preemption signal reached this rank; every rank saved the checkpoint at "
                            f"step {trainer.global_step} and stopped")


def test_sigterm_before_training_ends_the_run_at_once_through_its_hooks(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Before the first step (here: the sanity check) there is nothing to save: the run ends right away, and still
    through on_exception, teardown and its loggers (the default action killed the process without them)."""
    recorder = _Recorder(in_sanity=True)
    train, val = tiny_loaders()
    trainer = Trainer(max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False, callbacks=[recorder],
                      logger=CSVLogger(tmp_path))
    with pytest.raises(SIGTERMException):
        trainer.fit(TinyClassifier(), train, val)
    assert recorder.calls == ["on_exception:SIGTERMException", "teardown"] and trainer.global_step == 0
    assert trainer.received_sigterm and not list(tmp_path.rglob("*.ckpt"))
    assert "SIGTERM before training started: nothing to save" in capsys.readouterr().err


def test_a_refused_requeue_says_how_to_make_jobs_requeueable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    scontrol = tmp_path / "scontrol"  # a test double of SLURM's scontrol (SLURM runs in tests_integration/test_slurm.py)
    scontrol.write_text("#!/bin/sh\necho 'Requested operation is presently disabled for job 7' >&2\nexit 1\n")
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    _requeue("7")
    err = capsys.readouterr().err
    assert "SLURM job 7 not requeued (Requested operation is presently disabled for job 7)" in err
    assert "--requeue" in err and "JobRequeue=1" in err
