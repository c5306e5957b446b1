"""Trial E, D21: ranks whose monitored metric differs (logged without ``sync_dist``) must agree on what to save and
when to stop; a checkpoint saved on one rank only left the other waiting in a collective until the hang report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rank_env import torchrun_env
from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import free_port, python_command, run_processes

SCRIPT = str(Path(__file__).parent / "scripts" / "unsynced_monitor_ddp.py")


def _env(rank: int, port: int) -> dict[str, str]:
    return torchrun_env(rank, port, run_id="unsynced")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ranks_that_disagree_on_a_monitored_metric_save_and_stop_together(tmp_path: Path) -> None:
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")
    port = free_port()
    run_processes([python_command(SCRIPT, str(tmp_path))] * 2, envs=[_env(0, port), _env(1, port)], timeout=180,
                  cwd=tmp_path).check()
    ends = [json.loads((tmp_path / f"end_rank{r}.json").read_text()) for r in range(2)]
    assert ends[0] == ends[1]
    # Rank 1's constant metric stops the run after its patience of 1 (any rank may stop all, as Lightning); the
    # first epoch's checkpoint is the only one every rank ranked into the top 1.
    assert (ends[0]["epoch"], ends[0]["step"]) == (2, 4), ends  # 2 steps an epoch: 16 samples, batch 4, 2 ranks
    assert ends[0]["files"] == ["epoch=0-step=2.ckpt"], ends
