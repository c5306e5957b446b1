"""A ConfigError or CheckpointError raised in spawned or forked ranks reaches the caller as itself.

Before, the caller got a ``RankFailedError`` holding the traceback text, so ``except ConfigError`` (what the docs
promise for a doomed run, such as an empty training loader) did not catch it under ``ddp_spawn``; nor when one rank
refused and another, stopped while it waited, was the first failure seen."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from xtrain.core.testing import run_processes

SCRIPT = """
import sys
from torch.utils.data import DataLoader
from xtrain.core import Callback, CheckpointError, ConfigError, Trainer
from xtrain.core.testing import TinyClassifier, tiny_dataset


class OneRankRefuses(Callback):  # rank 1 refuses (its part of a checkpoint); rank 0 waits for it and is stopped
    def on_fit_start(self, trainer, module):
        if trainer.global_rank == 1:
            raise CheckpointError("rank 1 refuses its part")
        trainer.strategy.barrier()

if __name__ == "__main__":
    options = dict(accelerator="cpu", devices=2, strategy=sys.argv[1], max_epochs=1, logger=False,
                   enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    try:  # 6 samples over 2 ranks, batches of 4 with drop_last: no rank gets a batch
        Trainer(**options).fit(TinyClassifier(), DataLoader(tiny_dataset(6), batch_size=4, drop_last=True))
    except ConfigError as err:
        print("CAUGHT ConfigError:", err)
    with open("damaged.ckpt", "wb") as f:  # read in the ranks, which refuse it
        f.write(b"PK\x03\x04 not a checkpoint")
    try:
        Trainer(**options).fit(TinyClassifier(), DataLoader(tiny_dataset(64), batch_size=4), ckpt_path="damaged.ckpt")
    except CheckpointError as err:
        print("CAUGHT CheckpointError:", err)
    try:
        Trainer(**options, callbacks=[OneRankRefuses()]).fit(TinyClassifier(), DataLoader(tiny_dataset(64), batch_size=4))
    except CheckpointError as err:
        print("CAUGHT one rank's CheckpointError:", err)
"""


@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp_fork"])
def test_the_callers_except_clause_catches_it(tmp_path: Path, strategy: str) -> None:
    script = tmp_path / "doomed.py"
    script.write_text(SCRIPT)
    result = run_processes([[sys.executable, str(script), strategy]], timeout=180, cwd=tmp_path)
    assert result.returncodes == [0], result.output
    assert "CAUGHT ConfigError: train_dataloaders=" in result.output and "gets 0 batches" in result.output
    assert "CAUGHT CheckpointError:" in result.output and "damaged.ckpt" in result.output
    assert "CAUGHT one rank's CheckpointError: rank 1 refuses its part" in result.output
    assert "RankFailedError" not in result.output
