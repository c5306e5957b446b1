"""``XTRAIN_COLLECTIVE_CHECK=1``: two real gloo ranks compare every collective xtrain issues before running it.

Collectives in another order are refused on both ranks, naming each rank's collective and call site; a run whose
collectives match trains to the end with the check comparing each of them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import RunResult, leftover_processes, run_processes

SCRIPT = Path(__file__).parent / "scripts" / "collective_check_run.py"


@pytest.fixture(autouse=True)
def _needs_ddp() -> None:
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")


def line_of(marker: str) -> str:
    lines = SCRIPT.read_text().splitlines()
    number = next(i for i, line in enumerate(lines, start=1) if f"# ORDER: {marker}" in line)
    return f"collective_check_run.py:{number}"


def run(tmp_path: Path, case: str, **settings: Any) -> RunResult:
    settings = {"case": case, "out": str(tmp_path), "strategy": "ddp", "devices": 2, **settings}
    result = run_processes([[sys.executable, str(SCRIPT), json.dumps(settings)]], timeout=120.0,
                           envs=[{"XTRAIN_COLLECTIVE_CHECK": "1"}], cwd=tmp_path)
    time.sleep(0.3)
    assert not result.timed_out, result.output
    assert not leftover_processes(result), result.output
    return result


def _horovod() -> None:
    if os.environ.get("XTRAIN_REQUIRE_HOROVOD") != "1":
        pytest.importorskip("horovod.torch", reason="Horovod is not installed (python tools/build_horovod.py)")


STRATEGY = ["ddp", pytest.param("horovod", marks=pytest.mark.horovod)]
REDUCE = {"ddp": "all_reduce", "horovod": "allreduce"}


@pytest.mark.parametrize("strategy", STRATEGY)
def test_collectives_in_another_order_are_refused_on_every_rank(tmp_path: Path, strategy: str) -> None:
    if strategy == "horovod":
        _horovod()
    result = run(tmp_path, "order", strategy=strategy)
    output = result.output
    assert result.returncodes != [0], output
    assert "CollectiveMismatchError" in output, output
    for rank in (0, 1):  # each rank found it and said so, naming both call sites
        block = output.split(f"this is rank {rank}:", 1)[1].split("Every rank must", 1)[0]
        assert f"rank 0: {REDUCE[strategy]} float32 (2,) at {SCRIPT}" in block, output
        assert line_of("rank 0 first") in block, output
        assert "rank 1: barrier('before the reduce')" in block and line_of("rank 1 first") in block, output


@pytest.mark.parametrize("strategy", STRATEGY)
def test_matching_collectives_run_unchanged(tmp_path: Path, strategy: str) -> None:
    if strategy == "horovod":
        _horovod()
    result = run(tmp_path, "match", strategy=strategy)
    assert result.returncodes == [0], result.output
    assert "CollectiveMismatchError" not in result.output
    records = [json.loads((tmp_path / f"finished_rank{r}").read_text()) for r in (0, 1)]
    # every step's sync_dist log and gather went through the check, the same number on both ranks
    assert records[0]["checked"] == records[1]["checked"] >= 16, records
