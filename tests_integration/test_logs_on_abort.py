"""Logs are flushed when a rank is ended because another rank failed (it exits at once, without teardown)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import leftover_processes, python_command, run_processes

SCRIPT = str(Path(__file__).parent / "scripts" / "crash_with_logs.py")


def test_rank_zero_flushes_tensorboard_when_another_rank_fails(tmp_path: Path) -> None:
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    result = run_processes([python_command(SCRIPT, str(tmp_path))], timeout=120, cwd=tmp_path)
    assert result.returncodes[0] not in (0, None), result.output
    assert "rank 1 crashed on purpose" in result.output
    assert not leftover_processes(result)
    acc = event_accumulator.EventAccumulator(str(tmp_path / "xtrain_logs" / "version_0"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("train_loss")] == [0, 1, 2, 3, 4]
    # A logger that buffers in memory is flushed by the abort handler before the watchdog ends rank 0.
    flushed = json.loads((tmp_path / "buffered" / "version_0" / "rows.json").read_text())
    assert flushed["status"] == "failed" and [r["step"] for r in flushed["rows"]] == [0, 1, 2, 3, 4]
