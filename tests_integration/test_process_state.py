"""What a multi-process fit leaves behind in the processes that ran it (real gloo processes; see the script)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import python_command, run_processes

SCRIPT = str(Path(__file__).parent / "scripts" / "process_state.py")

pytestmark = pytest.mark.skipif("ddp" not in STRATEGIES, reason="needs xtrain-strategies")


def findings(mode: str, tmp_path: Path, *, timeout: float = 180) -> tuple[list[dict[str, Any]], str]:
    result = run_processes([python_command(SCRIPT, mode)], timeout=timeout, cwd=tmp_path)
    assert not result.timed_out, result.output
    lines = [json.loads(line[len("STATE "):]) for line in result.output.splitlines() if line.startswith("STATE ")]
    return lines, result.output


def test_ddp_ranks_free_each_trainer_and_put_faulthandler_back(tmp_path: Path) -> None:
    """Under strategy="ddp" every rank goes on running the script after fit: a deleted Trainer and its (DDP-wrapped)
    module are freed, and faulthandler, which the watchdog turns on, is off again as it was."""
    lines, output = findings("ddp", tmp_path)
    assert sorted(line["rank"] for line in lines) == ["0", "1"], output
    assert all(line["alive"] == 0 and line["faulthandler"] is False for line in lines), output


def test_ddp_spawn_ranks_take_the_callers_settings_and_leave_its_environment(tmp_path: Path) -> None:
    """A spawned rank is a fresh interpreter: it trains under the caller's deterministic mode and random state (as a
    forked one would); the rendezvous variables do not outlive the fit in the caller; a KeyboardInterrupt in a rank
    fails the fit and names that rank (torch's spawn wrapper would have let the rank exit 0)."""
    lines, output = findings("spawn", tmp_path)
    ranks = [line for line in lines if line["rank"] in ("0", "1")]
    assert len(ranks) == 2 and all(r["deterministic"] and r["warn_only"] for r in ranks), output
    assert ranks[0]["draw"] == ranks[1]["draw"], output  # unseeded fresh interpreters would differ
    caller = {key: value for line in lines if line["rank"] == "caller" for key, value in line.items()}
    assert caller["environ_unchanged"] is True, output
    assert caller["interrupted"].startswith("RankFailedError: rank 1 failed"), output
    assert "KeyboardInterrupt" in caller["interrupted"] and "was interrupted" in caller["interrupted"], output


def test_interrupting_the_caller_of_ddp_spawn_ends_its_ranks(tmp_path: Path) -> None:
    """SIGINT that reaches the caller only (a notebook's "interrupt kernel") ends the ranks too, within the launcher's
    grace period, and fit raises KeyboardInterrupt."""
    lines, output = findings("interrupt", tmp_path)
    assert {"rank": "caller", "raised": "KeyboardInterrupt"} in lines, output
    left = next(line for line in lines if "ranks_left" in line)
    assert left["ranks_left"] == 0 and left["seconds"] < 5, output
