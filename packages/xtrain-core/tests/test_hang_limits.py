"""Hang detection's limits and reports after an outside trial (trial C), in one process.

The first step's allowance stays below the process-group timeout, a ``hang_timeout`` that cannot work is refused or
warned about, the summary names the global step, and the collective check's wait leaves the watchdog's connection
free. The multi-process behaviour is tests_integration/test_trial_c_failures.py.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist

from xtrain.core._internal import collective_check
from xtrain.core._internal.hang import HangMonitor, first_step_limit, parse_hang_timeout
from xtrain.core._internal.hang_report import format_summary
from xtrain.core._internal.progress_signal import PROGRESS, ProgressSignal
from xtrain.core.errors import ConfigError


@pytest.mark.parametrize("tiny", [0.001, 0.5, timedelta(milliseconds=10)])
def test_a_hang_timeout_below_a_second_is_refused(tiny: Any) -> None:
    with pytest.raises(ConfigError, match="below the minimum of 1 s") as err:
        parse_hang_timeout(tiny)
    assert "hang_timeout=None" in str(err.value)
    assert parse_hang_timeout(1) == 1.0


@pytest.mark.parametrize(("timeout", "collective", "expected"), [
    (10.0, None, 40.0),  # no process group: 4 x hang_timeout
    (6.0, 20.0, 15.0),  # 4 x 6 = 24 s would come after torch's 20 s: capped 5 s before it
    (900.0, 1800.0, 1740.0),  # the defaults: 1 h would come after 30 min; the report comes a minute before it
    (60.0, 1800.0, 240.0),  # far below: unchanged
    (25.0, 20.0, 25.0),  # hang_timeout above the timeout (warned about): no allowance, never below hang_timeout
])
def test_the_first_step_allowance_stays_below_the_process_group_timeout(timeout: float, collective: float | None,
                                                                         expected: float) -> None:
    assert first_step_limit(timeout, collective) == expected


def test_a_first_step_hang_is_reported_before_the_process_group_timeout() -> None:
    signal = ProgressSignal()
    store = dist.HashStore()  # type: ignore[attr-defined]
    watch = HangMonitor(store, timeout=6.0, thread_id=threading.get_ident(), now=0.0, signal=signal,
                        collective_timeout=20.0)
    signal.begin("train")
    assert watch.poll(0.5) is None  # the begin is seen here
    assert watch.poll(15.4) is None
    reason = watch.poll(16.0)
    assert reason is not None and "limit 15 s" in reason


def test_hang_timeout_at_or_above_the_process_group_timeout_is_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Trainer and the Engine hand ``hang_timeout`` to the strategy with ``set_hang_timeout``, which warns (here
    directly: a Trainer with ``strategy="ddp"`` refuses a process started with ``python -c``, as pytest's workers)."""
    import warnings

    import xtrain.core.parallel as parallel

    strategies = pytest.importorskip("xtrain.strategies")
    # What is tested is the warning, not rank 0's filter (whose global rank another test of the process may have set).
    monkeypatch.setattr(parallel, "rank_zero_warn",
                        lambda message, category=UserWarning, stacklevel=2: warnings.warn(message, category, 2))
    with pytest.warns(UserWarning, match=r"hang_timeout=900 s is not below .*\(60 s") as record:
        strategies.DDPStrategy(timeout=timedelta(seconds=60)).set_hang_timeout(900.0)
    assert "timedelta(seconds=1800)" in str(record[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        strategies.DDPStrategy(timeout=timedelta(seconds=60)).set_hang_timeout(30.0)
        strategies.DDPStrategy(timeout=timedelta(seconds=60)).set_hang_timeout(None)

def _report(rank: int, phase: str, *, steps: int, phase_steps: int, global_step: int | None) -> dict[str, Any]:
    return {"rank": rank, "host": "h", "pid": 100 + rank, "stalled": 12.0, "phase": phase, "steps": steps,
            "phase_steps": phase_steps, "global_step": global_step, "waiting": None if rank == 1 else "barrier",
            "doing": "running", "user_frame": None, "collective": "", "collectives": 0, "in_collective": False,
            "workers": []}


def test_the_summary_names_the_global_step_and_the_evaluation_batch() -> None:
    # 7 steps counted (2 sanity-check batches, 5 training steps): the summary says global step 5.
    train = format_summary({0: _report(0, "train", steps=7, phase_steps=5, global_step=5),
                            1: _report(1, "validate", steps=22, phase_steps=3, global_step=16)},
                           world_size=2, reporter=1, reason="r", timeout=5.0)
    assert "in train at global step 5;" in train and "after 7 steps" not in train
    assert "in validate after 3 batches (global step 16);" in train
    engine = format_summary({1: _report(1, "engine", steps=4, phase_steps=4, global_step=None)}, world_size=1,
                            reporter=1, reason="r", timeout=5.0)
    assert "in engine after 4 batches;" in engine


def test_the_collective_check_waits_on_a_connection_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank waiting in the check must not hold the connection its watchdog's heartbeats use."""
    monkeypatch.setenv(collective_check.ENV, "1")
    server = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=4))  # type: ignore[attr-defined]
    watchdog_store = dist.PrefixStore("xtrain/watchdog/0/", server)  # type: ignore[attr-defined]
    collective_check.install(watchdog_store, rank=0, world_size=2)
    checker = PROGRESS.checker
    assert checker is not None
    try:
        def wait_for_rank_1() -> None:
            with pytest.raises(dist.DistStoreError):
                checker("barrier", None)

        waiter = threading.Thread(target=wait_for_rank_1, daemon=True)
        waiter.start()  # waits for rank 1's fingerprint, which never comes (until the store's 4 s timeout)
        time.sleep(0.5)
        start = time.monotonic()
        watchdog_store.add("hb/0", 1)
        assert time.monotonic() - start < 1.0, "the heartbeat waited for the check's wait"
        waiter.join(10)
    finally:
        collective_check.uninstall()
