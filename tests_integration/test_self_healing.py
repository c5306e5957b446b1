"""Jobs that heal themselves, with real processes: restarts by xtrain's launcher and by torchrun, a deterministic
failure that stops early, and an elastic torchrun job that loses a node (2 -> 1 workers).

About 4 minutes on 2 cores, so not in the default run: ``nox -s self_healing`` (marker ``self_healing``, run
where ``XTRAIN_SELF_HEALING_TESTS=1``). Each test
prints the wall time a restart cost (from the failure to the first step after it) next to a fresh job's time to its
first step.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest
import torch

from xtrain.core.testing import free_port, python_command, run_processes

pytestmark = [pytest.mark.self_healing, pytest.mark.timeout(400),
              pytest.mark.skipif(os.environ.get("XTRAIN_SELF_HEALING_TESTS") != "1",
                                 reason="slow self-healing runs: nox -s self_healing")]

SCRIPT = str(Path(__file__).parent / "scripts" / "healing_run.py")
# After a node leaves, the loss right after the resume may not exceed the loss at the checkpoint it resumed from by
# more than this (absolute): the run continues, it does not start over (a fresh model's loss is about 0.7 here).
LOSS_TOLERANCE = 0.1


def torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


def assert_bitwise_equal(a: Path, b: Path) -> None:
    wa, wb = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), f"{key} differs"


def restart_cost(out: str, started: float) -> str:
    """``fresh first step: X s; restart: Y s`` from the script's timestamps."""
    firsts = [float(t) for t in re.findall(r"attempt \S+ first step at ([\d.]+) \(rank 0", out)]
    failed = [float(t) for t in re.findall(r"failing at ([\d.]+)", out)]
    cost = f"fresh job to first step: {firsts[0] - started:.1f} s"
    if failed and len(firsts) > 1:
        cost += f"; failure to first step after the restart: {firsts[1] - failed[0]:.1f} s"
    return cost


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The final weights of an uninterrupted 2-process run."""
    root = tmp_path_factory.mktemp("reference")
    result = run_processes([python_command(SCRIPT, str(root / "run"), str(root / "full.pt"))], timeout=240, cwd=root)
    assert result.returncodes == [0], result.output
    return root / "full.pt"


def test_xtrain_launcher_restarts_after_a_sigkill_and_matches_an_uninterrupted_run(tmp_path: Path,
                                                                                   reference: Path) -> None:
    started = time.time()
    result = run_processes([python_command(SCRIPT, str(tmp_path / "run"), str(tmp_path / "out.pt"), "--auto",
                                           "--max-restarts", "2", "--kill-at", "13", "--kill-rank", "1")],
                           timeout=300, cwd=tmp_path)
    out = result.output
    assert result.returncodes == [0], out
    assert "rank 1 killed by SIGKILL" in out and "restart 1 of 2" in out
    assert re.search(r"ckpt_path='auto': resuming run 'restart-group-\w+' \(from XTRAIN_RUN_ID\), restart 1", out)
    assert "finished at epoch 3 step 24" in out
    assert_bitwise_equal(reference, tmp_path / "out.pt")
    dirs = [p.name for p in (tmp_path / "run" / "xtrain_logs").iterdir()]
    assert len(dirs) == 1 and dirs[0].startswith("restart-group-"), "both attempts log into one directory"
    print("xtrain launcher:", restart_cost(out, started))


def test_torchrun_max_restarts_resumes_by_itself(tmp_path: Path, reference: Path) -> None:
    started = time.time()
    result = run_processes([torchrun("--standalone", "--nproc-per-node=2", "--max-restarts=2", SCRIPT,
                                     str(tmp_path / "run"), str(tmp_path / "out.pt"), "--auto", "--kill-at", "13")],
                           timeout=300, cwd=tmp_path)
    out = result.output
    assert result.returncodes == [0], out
    assert "(from TORCHELASTIC_RUN_ID), restart 1 from" in out and "finished at epoch 3 step 24" in out
    assert_bitwise_equal(reference, tmp_path / "out.pt")
    print("torchrun:", restart_cost(out, started))


def test_a_deterministic_failure_stops_after_the_second_identical_one(tmp_path: Path) -> None:
    result = run_processes([python_command(SCRIPT, str(tmp_path / "run"), str(tmp_path / "out.pt"), "--auto",
                                           "--max-restarts", "5", "--raise-at", "7")], timeout=300, cwd=tmp_path)
    out = result.output
    assert result.returncodes == [1], out
    assert out.count("RuntimeError: a deterministic bug at step 7) at step 7") == 2, out
    assert "the same failure as the previous attempt: it is deterministic" in out
    assert "stopping after 1 restart(s) instead of 5" in out and "restart 2 of 5" not in out
    assert not (tmp_path / "out.pt").exists()


def test_elastic_torchrun_continues_with_one_worker_after_a_node_leaves(tmp_path: Path) -> None:
    port = free_port()
    conf = "last_call_timeout=5,join_timeout=90,keep_alive_interval=1,keep_alive_max_attempt=2"
    common = ["--nnodes=1:2", "--nproc-per-node=1", "--max-restarts=1", "--rdzv-backend=c10d",
              f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=elastic-test"]
    args = [SCRIPT, str(tmp_path / "run"), str(tmp_path / "out.pt"), "--devices", "1", "--auto", "--leave-at", "13"]
    losses = tmp_path / "losses.txt"
    started = time.time()
    result = run_processes([torchrun(*common, f"--rdzv-conf=is_host=true,{conf}", *args, "--losses", str(losses)),
                            torchrun(*common, f"--rdzv-conf=is_host=false,{conf}", *args)],
                           envs=[{}, {"HEAL_LEAVER": "1"}], timeout=300, cwd=tmp_path)
    host = result.processes[0].output
    assert result.returncodes[0] == 0, result.output
    assert "resuming a checkpoint of 2 data-parallel rank(s) with 1: keeping the per-rank batch" in host
    assert "the interrupted epoch continues exactly at batch 4" in host
    # 10 steps at 2 ranks (8 batches per epoch), then the rest of epoch 1 (12 of 16 batches) and epoch 2 at 1 rank.
    assert "finished at epoch 3 step 38" in host
    rows = [line.split() for line in losses.read_text().splitlines()]
    before = {int(step): float(loss) for step, loss, world in rows if world == "2"}
    after = [(int(step), float(loss)) for step, loss, world in rows if world == "1"]
    assert after[0][0] == 11, "resumed after the checkpoint at step 10"
    assert max(loss for _, loss in after[:3]) <= before[10] + LOSS_TOLERANCE, (before, after[:3])
    print("elastic torchrun:", restart_cost(result.output, started))
