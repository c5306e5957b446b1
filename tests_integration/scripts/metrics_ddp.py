"""Validate a model that logs torchmetrics objects, under ddp on 2 CPU processes; rank 0 writes the logged values.

    python metrics_ddp.py OUT.json

Validates twice: ``auto``, the Trainer shards the 96 samples (48 per rank, last batches of 8); ``uneven``, each rank
brings its own shard through its own sampler, with ``use_distributed_sampler`` off (61 and 35 samples, so 7 and 4
batches). A
``WandbLogger`` (offline, in the working directory) shows that only rank 0 starts a tracker run, and a
``SimpleProfiler`` with a ``filename`` writes one report per rank.
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

import torch
import torchmetrics
from torch.utils.data import DataLoader, Sampler

from xtrain.core import Trainer, TrainModule
from xtrain.core.loggers import WandbLogger
from xtrain.core.profilers import SimpleProfiler
from xtrain.core.testing import tiny_dataset

N, SPLIT, BATCH = 96, 61, 10


class Scored(TrainModule):
    """A fixed random classifier (seeded) that logs a macro F1 Metric and a MetricCollection."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.net = torch.nn.Linear(16, 4)
        self.f1 = torchmetrics.classification.MulticlassF1Score(num_classes=4, average="macro")
        self.collection = torchmetrics.MetricCollection({
            "acc": torchmetrics.classification.MulticlassAccuracy(num_classes=4, average="micro"),
            "recall": torchmetrics.classification.MulticlassRecall(num_classes=4, average="macro"),
        }, prefix="val_")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        preds = self.net(x).argmax(-1)
        self.f1.update(preds, y)
        self.log("val_f1", self.f1)
        self.collection.update(preds, y)
        self.log_dict(self.collection)
        self.log("val_acc_tensor", (preds == y).float().mean(), sync_dist=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data() -> Any:
    return tiny_dataset(N, seed=3)


class Shard(Sampler[int]):
    """This rank's own indices (a sampler type the Trainer does not replace; without use_distributed_sampler=False it
    would split it across the ranks again)."""

    def __init__(self, indices: range) -> None:
        self.indices = indices

    def __iter__(self) -> Any:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def main() -> None:
    out = sys.argv[1]
    logger = WandbLogger(save_dir=".", project="ddp", offline=True)
    trainer = Trainer(accelerator="cpu", strategy="ddp", devices=2, logger=logger, enable_progress_bar=False,
                      profiler=SimpleProfiler(dirpath="perf", filename="report"))
    module = Scored()
    with warnings.catch_warnings(record=True) as even:
        warnings.simplefilter("always")
        found = {"auto": trainer.validate(module, DataLoader(data(), batch_size=BATCH))[0]}
    with warnings.catch_warnings(record=True) as odd:  # 95 samples on 2 ranks: one is repeated
        warnings.simplefilter("always")
        trainer.validate(Scored(), DataLoader(tiny_dataset(N - 1, seed=3), batch_size=BATCH))
    found["repeat_warnings"] = [[str(w.message) for w in caught if "repeats" in str(w.message)]
                                for caught in (even, odd)]
    shard = range(SPLIT) if trainer.global_rank == 0 else range(SPLIT, N)
    trainer.use_distributed_sampler = False  # each rank brings its own shard (else split again, as in Lightning)
    found["uneven"] = trainer.validate(module, DataLoader(data(), batch_size=BATCH, sampler=Shard(shard)))[0]
    found["update_counts_after"] = [m._update_count for m in (module.f1, *module.collection.values())]
    found["run_id"] = logger.version
    if trainer.global_rank == 0:
        with open(out, "w") as f:
            json.dump(found, f)


if __name__ == "__main__":
    main()
