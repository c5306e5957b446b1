"""Nodes whose checkpoint folders are local disks must not resume from different places, nor wait for each other.

Under ``torchrun --nnodes=2`` each process resolves ``ckpt_path`` on its own machine: the node of global rank 0 finds
the ``last.ckpt`` it wrote, the other none (or an older copy), and an explicit path may exist on one node only.
Found by an outside trial on two emulated nodes: the ranks trained on from different steps and hung, and a path
missing on node 1 left node 0 waiting 30 minutes at the rendezvous. Now every rank raises one error naming what each
rank found, before anything is loaded or trained."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import free_port, python_command, run_processes

SCRIPT = str(Path(__file__).parent / "scripts" / "node_local_resume.py")


def _node_env(node: int, port: int) -> dict[str, str]:
    """What ``torchrun --nnodes=2 --nproc-per-node=1`` sets on ``node``."""
    return {"TORCHELASTIC_RUN_ID": "nodelocal", "RANK": str(node), "LOCAL_RANK": "0", "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": str(node), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


def _fit(out: Path, epochs: int, ckpt_path: str) -> list[dict[str, object]]:
    port = free_port()
    for old in out.glob("rank*.json"):
        old.unlink()
    run_processes([python_command(SCRIPT, str(out), str(epochs), ckpt_path)] * 2,
                  envs=[_node_env(n, port) for n in range(2)], timeout=150, cwd=out).check()
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def _refused(results: list[dict[str, object]], kind: str) -> str:
    assert results[0] == results[1] and results[0].get("type") == kind, results
    assert results[0]["every_rank"] is True
    return str(results[0]["error"])


@pytest.mark.slow
@pytest.mark.timeout(500)
def test_nodes_that_find_different_checkpoints_refuse_together(tmp_path: Path) -> None:
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")
    assert _fit(tmp_path, 1, "-") == [{"epoch": 1, "step": 2}] * 2
    written = next((tmp_path / "node0").rglob("last.ckpt"))
    assert not list((tmp_path / "node1").iterdir())  # global rank 0 alone writes

    # Node 1's folder has no checkpoint: it would start at step 0 while node 0 resumes at step 2.
    relative = str(written.relative_to(tmp_path / "node0"))
    message = _refused(_fit(tmp_path, 2, "last"), "CheckpointError")
    assert f"rank 0 (node 0): {relative}; rank 1 (node 1): none found" in message
    assert "shared filesystem" in message

    # A path on node 0's disk only: node 1 does not refuse alone (node 0 would wait for it at the rendezvous).
    message = _refused(_fit(tmp_path, 2, relative), "CheckpointError")
    assert "rank 1 (node 1): ckpt_path=" in message and "does not exist" in message
    # A path no node has: the ConfigError a single node raises, on every rank.
    message = _refused(_fit(tmp_path, 2, "missing.ckpt"), "ConfigError")
    assert message.startswith("ckpt_path=") and "missing.ckpt" in message and "does not exist" in message

    # A copy on node 1's disk one epoch older than node 0's: the same name, another position.
    shutil.copytree(tmp_path / "node0", tmp_path / "node1", dirs_exist_ok=True)
    assert _fit(tmp_path, 2, "last") == [{"epoch": 2, "step": 4}] * 2  # node 0 writes a newer last.ckpt
    message = _refused(_fit(tmp_path, 3, "last"), "CheckpointError")
    assert "rank 0: epoch 2, step 4" in message and "rank 1: epoch 1, step 2" in message

    # The same checkpoint on both disks resumes.
    shutil.rmtree(tmp_path / "node1")
    shutil.copytree(tmp_path / "node0", tmp_path / "node1")
    assert _fit(tmp_path, 3, "last") == [{"epoch": 3, "step": 6}] * 2
