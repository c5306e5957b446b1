"""Validation inside fit under ddp sees rank 0's BatchNorm statistics on every rank (an outside trial found
rank 1 validating with its own, so ``val_loss`` and the checkpoint it ranks differed from Lightning's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import python_command, run_processes

SCRIPT = str(Path(__file__).parent / "scripts" / "bn_validation_ddp.py")


def _seen(tmp_path: Path, broadcast: bool) -> list[list[float]]:
    if "ddp" not in STRATEGIES:
        pytest.skip("ddp needs xtrain-strategies")
    result = run_processes([python_command(SCRIPT, str(tmp_path), "1" if broadcast else "0")], timeout=180,
                           cwd=tmp_path)
    assert result.returncodes == [0], result.output
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_every_rank_validates_with_rank_zeros_buffers(tmp_path: Path) -> None:
    rank0, rank1 = _seen(tmp_path, broadcast=True)
    assert len(rank0) == 3  # the sanity check and two epochs
    assert rank0 == rank1


def test_without_broadcast_buffers_each_rank_keeps_its_own(tmp_path: Path) -> None:
    rank0, rank1 = _seen(tmp_path, broadcast=False)
    assert rank0[0] == rank1[0]  # the sanity check: nothing trained yet
    assert rank0[1:] != rank1[1:]
