"""Trial F, D5 under ``ddp``: each loader of a combined (dict) training set gets its own distributed sampler."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rank_env import torchrun_env
from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import free_port, python_command, run_processes

SCRIPT = str(Path(__file__).parent / "scripts" / "combined_ddp.py")


def _env(rank: int, port: int) -> dict[str, str]:
    return torchrun_env(rank, port, run_id="combined")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_each_combined_loader_is_sharded_across_ranks(tmp_path: Path) -> None:
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")
    port = free_port()
    run_processes([python_command(SCRIPT, str(tmp_path))] * 2, envs=[_env(0, port), _env(1, port)], timeout=180,
                  cwd=tmp_path).check()
    ranks = [json.loads((tmp_path / f"seen_rank{r}.json").read_text()) for r in range(2)]
    for rank in ranks:
        # 8 batches of "a" and 4 of "b" over 2 ranks: 4 and 2 per rank, "b" cycled to 4 (max_size_cycle).
        assert (rank["batches"], rank["steps"], len(rank["seen"])) == (4, 4, 4)
        assert [batch["b"] for batch in rank["seen"][2:]] == [batch["b"] for batch in rank["seen"][:2]]
    for key, size in (("a", 16), ("b", 8)):
        shares = [{x for batch in rank["seen"] for x in batch[key]} for rank in ranks]
        assert not shares[0] & shares[1], f"loader {key!r}: both ranks trained on the same samples"
        assert len(shares[0] | shares[1]) == size
