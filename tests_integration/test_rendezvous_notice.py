"""A node that waits for nodes that never start says so (an outside trial, trial H: ``num_nodes=2`` without the
other node waited silently until killed, ``hang_timeout`` cannot apply before the process group exists)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xtrain.core.registry import STRATEGIES

pytestmark = [pytest.mark.timeout(120)]

SCRIPT = textwrap.dedent("""
    from datetime import timedelta
    import xtrain.core.parallel as parallel
    from xtrain.core import Trainer
    from xtrain.core.testing import TinyClassifier, tiny_loaders
    from xtrain.strategies import DDPStrategy
    parallel._RENDEZVOUS_NOTICE_S = 1.0
    trainer = Trainer(accelerator="cpu", devices=1, num_nodes=2, strategy=DDPStrategy(timeout=timedelta(seconds=6)),
                      max_steps=1, logger=False, enable_progress_bar=False, enable_checkpointing=False,
                      hang_timeout=3)
    trainer.fit(TinyClassifier(), tiny_loaders()[0])
""")


def test_a_node_waiting_for_the_others_names_the_address_and_what_they_need(tmp_path: Path) -> None:
    if "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")
    script = tmp_path / "one_node.py"
    script.write_text(SCRIPT)
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "MASTER_PORT": "29731"}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=100, env=env,
                            cwd=tmp_path, check=False)
    assert result.returncode != 0, result.stderr
    assert ("xtrain: rank 0 has waited 1 s for all 2 processes to join at 127.0.0.1:29731 (node 0 of 2). The other "
            "nodes must start with MASTER_ADDR=127.0.0.1, MASTER_PORT=29731 and their own NODE_RANK (0 to 1)"
            in result.stderr), result.stderr
