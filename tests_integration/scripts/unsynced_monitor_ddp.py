"""A monitored metric logged without ``sync_dist`` that differs between the 2 ranks (a common mistake), with
``EarlyStopping`` and a top-1 ``ModelCheckpoint`` on it; ranks started externally (torchrun's variables).

    RANK=r WORLD_SIZE=2 ... python unsynced_monitor_ddp.py OUT

Rank 0 sees an improving metric, rank 1 a constant one. Writes ``end_rank{r}.json`` (epoch and step at the end)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import Trainer, TrainModule
from xtrain.core.callbacks import EarlyStopping, ModelCheckpoint

OUT = Path(sys.argv[1])


class Disagree(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.l = torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.l(batch[0]).pow(2).mean()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        score = 1.0 / (self.current_epoch + 1) if self.global_rank == 0 else 1.0
        self.log("score", torch.tensor(score))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    x = torch.randn(16, 2, generator=torch.Generator().manual_seed(0))
    trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=6, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, hang_timeout=60,
                      callbacks=[EarlyStopping("score", patience=1, min_delta=0.0),
                                 ModelCheckpoint(dirpath=OUT / "ck", monitor="score", save_top_k=1)])
    trainer.fit(Disagree(), DataLoader(TensorDataset(x), batch_size=4), DataLoader(TensorDataset(x), batch_size=4))
    (OUT / f"end_rank{trainer.global_rank}.json").write_text(
        json.dumps({"epoch": trainer.current_epoch, "step": trainer.global_step,
                    "files": sorted(p.name for p in (OUT / "ck").iterdir() if p.suffix == ".ckpt")}))
