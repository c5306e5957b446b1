"""BatchNorm statistics seen by validation inside fit under ddp: every rank's validation_step must see rank 0's
(as DDP's forward makes them and Lightning's validation through the wrapper sees them). Each rank trains on data
of another scale, so the ranks' running statistics differ after their own updates.

Run by test_bn_validation_ddp.py as ``python bn_validation_ddp.py OUT_DIR [--broadcast-buffers 0|1]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from xtrain.core import Trainer, TrainModule, seed_everything


class Scaled(Dataset):
    """Rank r's samples are (r + 1) times larger: its BatchNorm updates move the running mean differently."""

    def __init__(self, n: int) -> None:
        self.x = torch.randn(n, 4, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> torch.Tensor:
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        return self.x[i] * (rank + 1)


class WithNorm(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))
        self.seen: list[float] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.net(batch).pow(2).mean()

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        if batch_idx == 0:
            self.seen.append(float(self.net[1].running_mean.sum()))
        self.log("val_loss", self.net(batch).pow(2).mean(), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    out = Path(sys.argv[1])
    broadcast = sys.argv[2] == "1" if len(sys.argv) > 2 else True
    from xtrain.strategies import DDPStrategy

    seed_everything(1)
    module = WithNorm()
    trainer = Trainer(accelerator="cpu", devices=2, strategy=DDPStrategy(broadcast_buffers=broadcast), max_epochs=2,
                      logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=1, default_root_dir=str(out))
    trainer.fit(module, DataLoader(Scaled(32), batch_size=4), DataLoader(Scaled(16), batch_size=4))
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(module.seen))
