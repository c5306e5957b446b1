"""Lightning-parity behaviours that depend on ranks, on 2 real gloo processes (issue 18)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import leftover_processes, python_command, run_processes

SCRIPT = str(Path(__file__).parent / "scripts" / "parity_ranks.py")


@pytest.fixture(autouse=True)
def _needs_strategies() -> None:
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")


@pytest.mark.timeout(200)
def test_ddp_positional_datamodule_all_gather_and_manual_global_step(tmp_path: Path) -> None:
    result = run_processes([python_command(SCRIPT, "ddp", str(tmp_path))], timeout=180, cwd=tmp_path)
    assert result.returncodes == [0], result.output
    assert not leftover_processes(result)
    for rank in (0, 1):
        out = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert out["datamodule"] == "TinyData"
        assert out["global_step"] == 6  # 3 batches, 2 optimizer steps each
        assert out["gathered"] == [[2, 2]] * 3  # (world_size, *shape)
        assert out["scalars"] == {"plain": [10.0, 11.0], "sync_grads": [10.0, 11.0], "grad": 2.0,
                                  "nested": {"a": [2], "b": [2, 2], "c": [2]}}
        assert out["rank_zero_only"] == rank


@pytest.mark.timeout(200)
def test_ddp_splits_a_custom_batch_sampler_by_whole_batches_and_sets_its_epoch(tmp_path: Path) -> None:
    """A bucketing batch sampler under ddp: each rank trains on every other of its batches, unchanged (every rank used
    to train on all of them), and set_epoch reaches it each epoch, as in Lightning."""
    import sys

    sys.path.insert(0, str(Path(SCRIPT).parent))
    from parity_ranks import Buckets

    result = run_processes([python_command(SCRIPT, "bucketed", str(tmp_path))], timeout=180, cwd=tmp_path)
    assert result.returncodes == [0], result.output
    assert not leftover_processes(result)
    ranks = [json.loads((tmp_path / f"bucketed{rank}.json").read_text()) for rank in (0, 1)]
    keys = list(range(40))
    for epoch in (0, 1):
        sampler = Buckets(keys, batch_size=4)
        sampler.set_epoch(epoch)
        batches = list(sampler)  # 12 batches: 6 a rank
        per_rank = len(batches) // 2
        for rank, out in enumerate(ranks):
            assert out["seen"][epoch * per_rank:(epoch + 1) * per_rank] == batches[rank::2]
    for out in ranks:
        assert out["epochs"] == [0, 1] and out["steps"] == 12
    assert ranks[0]["weights"] == ranks[1]["weights"]


@pytest.mark.timeout(200)
def test_ddp_max_time_stops_every_rank_at_the_same_step(tmp_path: Path) -> None:
    """Rank 1 starts its clock 0.8 s after rank 0: each rank's own clock stopped rank 0 several steps before rank 1,
    which then waited in its gradient all-reduce for a rank that had left the loop. Rank 0's clock decides now."""
    result = run_processes([python_command(SCRIPT, "max_time", str(tmp_path))], timeout=120, cwd=tmp_path)
    assert result.returncodes == [0], result.output
    assert not leftover_processes(result)
    steps = [json.loads((tmp_path / f"max_time{rank}.json").read_text())["steps"] for rank in (0, 1)]
    assert steps[0] == steps[1] > 0


@pytest.mark.lightning_spawn
@pytest.mark.timeout(200)
@pytest.mark.skipif(os.environ.get("XTRAIN_LIGHTNING_SPAWN") != "1", reason="nox -s lightning_spawn runs it")
def test_ddp_spawn_log_dir_is_the_workers_and_test_reuses_it(tmp_path: Path) -> None:
    (tmp_path / "xtrain_logs" / "version_0").mkdir(parents=True)  # an earlier run
    result = run_processes([python_command(SCRIPT, "ddp_spawn", str(tmp_path))], timeout=180, cwd=tmp_path)
    assert result.returncodes == [0], result.output
    out = json.loads((tmp_path / "spawn.json").read_text())
    assert out["fit_dir"].endswith("version_1") and out["test_dir"] == out["fit_dir"]
    assert out["versions"] == ["version_0", "version_1"]
