"""Rank-dependent Lightning-parity behaviours on 2 CPU processes (issue 18).

``ddp``: fit(model, datamodule) positional, all_gather, manual optimization with two optimizers (global_step counts
optimizer steps), rank_zero_only. ``ddp_spawn``: the caller's log_dir is the workers' version, and a test() after fit
logs into the same version directory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from xtrain.core import CSVLogger, Trainer, seed_everything
from xtrain.core.rank_zero import rank_zero_only
from xtrain.core.testing import TinyClassifier, TinyData


class TwoOptimizers(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.gathered: list[list[int]] = []

    def training_step(self, batch: Any) -> None:  # type: ignore[override]
        x, y = batch
        self.gathered.append(list(self.all_gather(torch.tensor([self.global_rank, len(y)])).shape))
        for opt in self.optimizers():
            with self.toggled_optimizer(opt):
                loss = torch.nn.functional.cross_entropy(self(x), y)
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()

    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(self.net[0].parameters(), lr=0.1), torch.optim.SGD(self.net[3].parameters(), lr=0.1)]


def quiet(**kwargs: Any) -> Trainer:
    return Trainer(accelerator="cpu", devices=2, enable_progress_bar=False, enable_model_summary=False,
                   enable_checkpointing=False, **kwargs)


def ddp(root: str) -> None:
    seed_everything(0)
    module = TwoOptimizers()
    trainer = quiet(strategy="ddp", max_epochs=1, limit_train_batches=3, logger=False)
    trainer.fit(module, TinyData(batch_size=8))
    out = {"global_step": trainer.global_step, "gathered": module.gathered, "rank_zero_only": rank_zero_only.rank,
           "datamodule": type(trainer.datamodule).__name__}
    Path(root, f"rank{trainer.global_rank}.json").write_text(json.dumps(out))


def ddp_spawn(root: str) -> None:
    seed_everything(0)
    trainer = quiet(strategy="ddp_spawn", max_steps=2, logger=CSVLogger(root))
    trainer.fit(TinyClassifier(), TinyData(batch_size=8))
    fit_dir = str(trainer.log_dir)
    trainer.test(TinyClassifier(), TinyData(batch_size=8), verbose=False)
    versions = sorted(p.name for p in Path(root, "xtrain_logs").iterdir())
    Path(root, "spawn.json").write_text(json.dumps({"fit_dir": fit_dir, "test_dir": str(trainer.log_dir),
                                                    "versions": versions}))


if __name__ == "__main__":
    {"ddp": ddp, "ddp_spawn": ddp_spawn}[sys.argv[1]](sys.argv[2])
