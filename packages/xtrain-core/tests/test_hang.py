"""Hang detection's parts in one process: the setting, the detector's rules on a real store, the summary.

The multi-process behaviour (stacks of every rank, the exit within seconds) is tests_integration/test_hangs.py.
"""

from __future__ import annotations

import io
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from xtrain.core import Trainer
from xtrain.core._internal.hang import DEFAULT_HANG_TIMEOUT, HangMonitor, parse_hang_timeout
from xtrain.core._internal.hang_report import format_summary, innermost_user_frame, main_thread_state
from xtrain.core._internal.progress_signal import ProgressFile, ProgressSignal
from xtrain.core.errors import ConfigError


def test_hang_timeout_accepts_seconds_timedelta_and_none() -> None:
    assert parse_hang_timeout(5) == 5.0
    assert parse_hang_timeout(timedelta(minutes=2)) == 120.0
    assert parse_hang_timeout(None) is None


@pytest.mark.parametrize("bad", [0, -3, float("inf"), "10", True])
def test_hang_timeout_refuses_what_is_not_a_duration(bad: Any) -> None:
    with pytest.raises(ConfigError, match="hang_timeout") as err:
        parse_hang_timeout(bad)
    assert "hang_timeout=None" in str(err.value)


def test_trainer_hands_the_setting_to_its_strategy() -> None:
    assert Trainer(accelerator="cpu", logger=False).strategy.hang_timeout == DEFAULT_HANG_TIMEOUT == 900.0
    assert Trainer(accelerator="cpu", logger=False, hang_timeout=None).strategy.hang_timeout is None
    with pytest.raises(ConfigError, match="hang_timeout"):
        Trainer(accelerator="cpu", logger=False, hang_timeout=-1)


def monitor(signal: ProgressSignal, store: Any = None) -> HangMonitor:
    return HangMonitor(store or dist.HashStore(), timeout=10.0, thread_id=threading.get_ident(), now=0.0,
                       signal=signal)


def test_a_rank_without_progress_for_hang_timeout_is_hung() -> None:
    signal = ProgressSignal()
    watch = monitor(signal)
    signal.begin("train")
    signal.step("train")
    assert watch.poll(1.0) is None
    assert watch.poll(10.5) is None
    signal.step("train")
    assert watch.poll(11.0) is None  # progress restarts the clock
    reason = watch.poll(21.5)
    assert reason is not None and "no progress for 10.5 s" in reason


def test_the_first_step_of_each_loop_gets_four_times_as_long() -> None:
    signal = ProgressSignal()
    watch = monitor(signal)
    signal.begin("train")
    assert watch.poll(1.0) is None
    assert watch.poll(40.0) is None  # compiling the first step: allowed 4 x 10 s
    assert watch.poll(41.5) is not None
    signal.step("train")
    signal.begin("validate")  # the first validation batch gets the allowance again
    assert watch.poll(42.0) is None
    assert watch.poll(80.0) is None


def test_a_rank_waiting_in_a_collective_is_fine_while_another_rank_progresses() -> None:
    store = dist.HashStore()
    signal = ProgressSignal()
    watch = monitor(signal, store)
    signal.step("train")
    watch.poll(0.0)
    with signal.collective("barrier"):
        for now in (5.0, 12.0, 19.0):
            store.add("progress", 1)  # rank 0 writing a slow checkpoint, chunk after chunk
            assert watch.poll(now) is None
        assert watch.poll(31.0) is None  # 12 s: the stuck rank, if there is one, gets 2 s to report first
        reason = watch.poll(31.5)  # nobody progressed for 12.5 s: the ranks wait for each other
    assert reason is not None and "no rank made progress" in reason


def test_the_stuck_rank_reports_before_the_ranks_waiting_for_it() -> None:
    """Both ranks stall at once (one in user code, one in the all-reduce waiting for it), and the stuck rank's
    watchdog samples late (a loaded machine): it still reaches its limit first, so the report names it."""
    store = dist.HashStore()
    stuck_signal, waiting_signal = ProgressSignal(), ProgressSignal()
    stuck, waiting = monitor(stuck_signal, store), monitor(waiting_signal, store)
    for signal in (stuck_signal, waiting_signal):
        signal.step("train")
    samples = sorted([(0.5 * i, "waiting") for i in range(40)] + [(0.4 + 0.5 * i, "stuck") for i in range(20)]
                     + [(11.3 + 0.5 * i, "stuck") for i in range(20)])  # not scheduled from 9.9 s to 11.3 s
    first = None
    with waiting_signal.collective("backward"):
        for now, who in samples:
            if (stuck if who == "stuck" else waiting).poll(now) is not None:
                first = (who, now)
                break
    assert first == ("stuck", 11.3), first


def test_collectives_are_counted_and_named_outermost() -> None:
    signal = ProgressSignal()
    with signal.collective("all_gather_object"), signal.collective("all_gather"):
        state = main_thread_state(threading.get_ident(), signal)
    assert signal.collectives == 1 and signal.collective_name == "all_gather_object" and signal.depth == 0
    assert state.waiting == "all_gather_object (collective #1 xtrain entered)"
    assert state.user_frame is not None and "test_hang.py" in state.user_frame


def test_checkpoint_files_report_every_chunk() -> None:
    signal_count = ProgressFile.CHUNK
    sink = io.BytesIO()
    from xtrain.core._internal.progress_signal import PROGRESS

    before = PROGRESS.count
    ProgressFile.CHUNK = 4
    try:
        assert ProgressFile(sink).write(b"0123456789") == 10
    finally:
        ProgressFile.CHUNK = signal_count
    assert sink.getvalue() == b"0123456789" and PROGRESS.count - before == 3


def _report(rank: int, waiting: str | None, doing: str) -> dict[str, Any]:
    return {"rank": rank, "host": "h", "pid": 100 + rank, "stalled": 12.0, "phase": "train", "steps": 5,
            "waiting": waiting, "doing": doing, "user_frame": f"/me/train.py:{40 + rank} in training_step",
            "collective": "all_reduce", "collectives": 3, "in_collective": waiting is not None, "workers": []}


def test_the_summary_names_the_stuck_rank_first_and_the_missing_ones() -> None:
    reports = {0: _report(0, "backward (the gradient all-reduce)", "waiting in backward"),
               1: _report(1, None, "running training_step")}
    text = format_summary(reports, world_size=3, reporter=1, reason="rank made no progress for 12.0 s",
                          timeout=10.0)
    lines = text.splitlines()
    stuck = next(i for i, line in enumerate(lines) if "STUCK   rank 1 (host h, pid 101)" in line)
    waiting = next(i for i, line in enumerate(lines) if "waiting rank 0" in line)
    assert stuck < waiting and "/me/train.py:41 in training_step" in lines[stuck]
    assert "rank 2: no report" in text and "hang_timeout=10 s" in text and "do not match" not in text


def test_the_summary_calls_collectives_that_every_rank_waits_in_mismatched() -> None:
    reports = {0: _report(0, "barrier (collective #4 xtrain entered)", "waiting in barrier"),
               1: _report(1, "backward (the gradient all-reduce)", "waiting in backward")}
    text = format_summary(reports, world_size=2, reporter=0, reason="no rank made progress", timeout=10.0)
    assert "Stuck (not waiting for other ranks): none" in text
    assert "do not match" in text and "rank 0 in barrier" in text and "rank 1 in backward" in text


def test_a_save_on_one_rank_only_is_named_as_the_cause() -> None:
    """Accelerate's save is one rank's torch.save: ported under `if is_global_zero:`, engine.save hangs."""
    reports = {0: _report(0, "barrier('engine.save') (collective #9 xtrain entered)", "waiting in barrier"),
               1: _report(1, "backward (the gradient all-reduce)", "waiting in backward")}
    text = format_summary(reports, world_size=2, reporter=0, reason="no rank made progress", timeout=10.0)
    assert "barrier('engine.save') waits for every rank: call engine.save/engine.load on every rank" in text
    assert "is_global_zero" in text
    same = {r: _report(r, "barrier('engine.save') (collective #9 xtrain entered)", "waiting") for r in (0, 1)}
    assert "engine.save/engine.load on every rank" not in format_summary(
        same, world_size=2, reporter=0, reason="no rank made progress", timeout=10.0)


def test_innermost_user_frame_of_a_faulthandler_dump() -> None:
    dump = (f'Thread 0x1 (most recent call first):\n  File "{threading.__file__}", line 331 in wait\n'
            '  File "/me/data.py", line 57 in __getitem__\n  File "/me/train.py", line 9 in main\n')
    assert innermost_user_frame(dump) == "/me/data.py:57 in __getitem__"


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_sharded_checkpoint_writes_report_progress(tmp_path: Path) -> None:
    """Distributed-checkpoint files written through xtrain's writer report every chunk, like single files."""
    from torch.distributed.checkpoint import save
    from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
    from torch.distributed.checkpoint.state_dict_loader import load

    from xtrain.core._internal.progress_signal import PROGRESS, report_stream_writes

    state = {f"w{i}": torch.randn(64, 64) for i in range(4)}
    before = PROGRESS.count
    save(state, storage_writer=report_stream_writes(FileSystemWriter(str(tmp_path))), no_dist=True)
    assert PROGRESS.count - before >= 4
    loaded = {k: torch.zeros_like(v) for k, v in state.items()}
    load(loaded, storage_reader=FileSystemReader(str(tmp_path)), no_dist=True)
    assert all(torch.equal(loaded[k], state[k]) for k in state)
