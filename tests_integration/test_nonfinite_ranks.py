"""A NaN/inf loss on one rank only: every rank skips the same steps (replicas stay equal), or every rank stops."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import leftover_processes, python_command, run_processes

SCRIPT = str(Path(__file__).parent / "scripts" / "nonfinite_ranks.py")


def _weights(out: Path, rank: int) -> tuple[dict[str, torch.Tensor], int]:
    saved = torch.load(out / f"rank{rank}.pt", weights_only=True)
    return saved["weights"], saved["steps"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("api", ["trainer", "engine"])
def test_skip_keeps_the_replicas_equal(tmp_path: Path, api: str) -> None:
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")
    result = run_processes([python_command(SCRIPT, str(tmp_path), api, "skip")], timeout=200, cwd=tmp_path).check()
    assert "on rank(s) [1] at step 1 (epoch 0, batch 1)" in result.output
    (w0, steps0), (w1, steps1) = _weights(tmp_path, 0), _weights(tmp_path, 1)
    for name, value in w0.items():
        assert torch.isfinite(value).all(), name
        assert torch.equal(value, w1[name]), f"{name} differs between the ranks"
    if api == "trainer":
        assert steps0 == steps1 == 4 - 2  # 128 samples / 2 ranks / batch 16 = 4 batches, 2 of them skipped


@pytest.mark.timeout(240)
def test_raise_stops_every_rank_naming_the_rank(tmp_path: Path) -> None:
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")
    result = run_processes([python_command(SCRIPT, str(tmp_path), "trainer", "raise")], timeout=200, cwd=tmp_path)
    assert result.returncodes[0] not in (0, None), result.output
    assert "NonFiniteLossError" in result.output
    assert "non-finite on rank(s) [1] at step 1 (epoch 0, batch 1)" in result.output
    assert not list(tmp_path.glob("rank*.pt"))
    assert not leftover_processes(result)


@pytest.mark.timeout(240)
def test_raise_reaches_every_ranks_own_except(tmp_path: Path) -> None:
    """The ranks agree on the error (a gathered flag): it is not one rank's failure that stops the others, so each
    rank's ``except NonFiniteLossError`` runs and the job ends with the status the user's code gives it."""
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")
    result = run_processes([python_command(SCRIPT, str(tmp_path), "trainer", "raise_caught")], timeout=200,
                           cwd=tmp_path)
    assert result.returncodes == [0], result.output
    for rank in (0, 1):
        caught = (tmp_path / f"caught{rank}.txt").read_text()
        assert caught.startswith("True ") and "non-finite on rank(s) [1] at step 1 (epoch 0, batch 1)" in caught
    assert "failed; stopping" not in result.output, result.output
    assert not leftover_processes(result)
