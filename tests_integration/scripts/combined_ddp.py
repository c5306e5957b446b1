"""Two training loaders combined (a dict, max_size_cycle) under ``ddp`` on 2 CPU processes started externally.

    RANK=r WORLD_SIZE=2 ... python combined_ddp.py OUT

Writes ``seen_rank{r}.json``: the sample ids of every batch this rank trained on, per loader, and the batch count.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import Trainer, TrainModule

OUT = Path(sys.argv[1])


class Seen(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.l = torch.nn.Linear(1, 1)
        self.seen: list[dict[str, list[float]]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append({k: v[0].flatten().tolist() for k, v in batch.items()})
        return sum(self.l(v[0] / 100).pow(2).mean() for v in batch.values())  # type: ignore[return-value]

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    a = DataLoader(TensorDataset(torch.arange(16.0).unsqueeze(1)), batch_size=2, shuffle=True)
    b = DataLoader(TensorDataset(100 + torch.arange(8.0).unsqueeze(1)), batch_size=2)
    module = Seen()
    trainer = Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=1, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, {"a": a, "b": b})
    record = {"seen": module.seen, "batches": trainer.num_training_batches, "steps": trainer.global_step}
    (OUT / f"seen_rank{trainer.global_rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
