"""Running the fsdp test scripts in real processes and reading what they recorded."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from xtrain.core.testing import RunResult, leftover_processes, run_processes

SCRIPTS = Path(__file__).parent / "scripts"
RUN = SCRIPTS / "fsdp_run.py"
ENGINE = SCRIPTS / "engine_fsdp.py"
TIMEOUT = 240.0


def run_script(script: Path, *args: str, cwd: Path, timeout: float = TIMEOUT, check: bool = True) -> RunResult:
    result = run_processes([[sys.executable, str(script), *args]], timeout=timeout, cwd=cwd)
    if check:
        result.check()
    time.sleep(0.2)  # let the kernel reap what the run's last kill just ended
    assert not leftover_processes(result), f"processes outlived the run:\n{result.output}"
    return result


def train(out: Path, **settings: Any) -> list[dict[str, Any]]:
    """Run ``fsdp_run.py`` with ``settings``; returns every rank's record."""
    out.mkdir(parents=True, exist_ok=True)
    run_script(RUN, json.dumps({**settings, "out": str(out)}), cwd=out)
    records = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    assert records, "no rank wrote a record"
    return sorted(records, key=lambda r: r["rank"])


def weights(record: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v) for k, v in record["params"].items()}


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), f"{sorted(a)} != {sorted(b)}"
    return max(float((a[k].flatten() - b[k].flatten()).abs().max()) for k in a)
