"""Which preemption signals are caught during a fit, and what a late one does after it (under SLURM)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from xtrain.core._internal.preemption import Preemption


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
