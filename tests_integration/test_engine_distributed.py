"""One path to the hardware: a plain loop on the Engine and the Trainer end with equal weights under real DDP and
FSDP."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import python_command, run_processes

SCRIPT = str(Path(__file__).parent / "scripts" / "engine_vs_trainer.py")


# re-exec: engine.launch(); spawn: engine.launch(fn); fsdp: sharded, with the optimizer created before sharding
@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn", "fsdp"])
def test_engine_and_trainer_agree_under_two_processes(tmp_path: Path, strategy: str) -> None:
    if strategy not in STRATEGIES:
        pytest.skip(f"{strategy!r} needs xtrain-strategies")
    outs = {mode: tmp_path / f"{mode}.pt" for mode in ("engine", "trainer")}
    for mode, out in outs.items():
        result = run_processes([python_command(SCRIPT, mode, str(out), "--strategy", strategy, "--devices", "2")],
                               timeout=180, cwd=tmp_path)
        assert result.returncodes == [0], result.output
    engine, trainer = (torch.load(outs[m], weights_only=True) for m in ("engine", "trainer"))
    assert engine.keys() == trainer.keys()
    for key in engine:
        torch.testing.assert_close(engine[key], trainer[key], rtol=0, atol=1e-6)
