"""The Engine with real processes: the documented example runs, and a failing rank ends the run quickly."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import torch

from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import leftover_processes, python_command, run_processes

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "docs" / "examples" / "engine" / "engine.py")
PLAIN = str(ROOT / "docs" / "examples" / "engine" / "plain.py")
CRASH = str(Path(__file__).parent / "scripts" / "engine_crash.py")


def losses(output: str) -> list[float]:
    return [float(x) for x in re.findall(r"epoch \d: loss ([0-9.]+)", output)]


def test_the_engine_example_matches_the_plain_loop_it_came_from(tmp_path: Path) -> None:
    plain = run_processes([python_command(PLAIN)], timeout=120, cwd=tmp_path).check()
    engine = run_processes([python_command(EXAMPLE)], timeout=120, cwd=tmp_path).check()
    assert losses(engine.output) == losses(plain.output) and len(losses(plain.output)) == 3
    assert losses(plain.output)[-1] < losses(plain.output)[0]
    saved = torch.load(tmp_path / "model.ckpt", weights_only=True)
    assert saved["xtrain"]["written_by"] == "Engine" and "0.weight" in saved["model"]


def test_the_engine_example_runs_on_two_processes(tmp_path: Path) -> None:
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")
    result = run_processes([python_command(EXAMPLE, "--devices", "2", "--strategy", "ddp")], timeout=180,
                           cwd=tmp_path).check()
    assert len(losses(result.output)) == 3, "engine.print must print on rank 0 only"
    assert torch.load(tmp_path / "model.ckpt", weights_only=True)["xtrain"]["world_size"] == 2


def test_a_rank_failing_in_a_user_loop_ends_every_rank_quickly(tmp_path: Path) -> None:
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")
    result = run_processes([python_command(CRASH)], timeout=120, cwd=tmp_path)
    ended = time.time()
    assert result.returncodes[0] not in (0, None), result.output
    assert "rank 1 failed inside the user's loop" in result.output and "unreachable" not in result.output
    assert not leftover_processes(result)
    raised = float(re.search(r"rank 1 raising at ([0-9.]+)", result.output).group(1))  # type: ignore[union-attr]
    assert ended - raised < 15, f"every process was gone only {ended - raised:.1f} s after rank 1 raised"


def test_rank_zero_first_runs_the_block_on_rank_zero_before_the_others(tmp_path: Path) -> None:
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")
    script = str(Path(__file__).parent / "scripts" / "engine_rank_zero_first.py")
    result = run_processes([python_command(script, str(tmp_path / "data.txt"))], timeout=180, cwd=tmp_path).check()
    assert "rank 0 sees True" in result.output and "rank 1 sees True" in result.output
