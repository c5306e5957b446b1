"""Rank-dependent Lightning-parity behaviours on 2 CPU processes (issue 18).

``ddp``: fit(model, datamodule) positional, all_gather, manual optimization with two optimizers (global_step counts
optimizer steps), rank_zero_only. ``ddp_spawn``: the caller's log_dir is the workers' version, and a test() after fit
logs into the same version directory. ``bucketed``: a custom batch sampler (bucketing, with set_epoch) is split across
the ranks by whole batches, and told each epoch.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

from xtrain.core import CSVLogger, Trainer, seed_everything
from xtrain.core.rank_zero import rank_zero_only
from xtrain.core.testing import TinyClassifier, TinyData


class TwoOptimizers(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.gathered: list[list[int]] = []
        self.scalars: dict[str, Any] = {}

    def training_step(self, batch: Any) -> None:  # type: ignore[override]
        x, y = batch
        self.gathered.append(list(self.all_gather(torch.tensor([self.global_rank, len(y)])).shape))
        if not self.scalars:  # 0-dim values gather to (world_size,), as in Lightning; with sync_grads too
            value = torch.tensor(10.0 + self.global_rank, requires_grad=True)
            with_grads = self.all_gather(value, sync_grads=True)
            with_grads.sum().backward()
            nested = self.all_gather({"a": torch.tensor(1.0), "b": torch.zeros(2), "c": 2.5})
            self.scalars = {"plain": self.all_gather(torch.tensor(10.0 + self.global_rank)).tolist(),
                            "sync_grads": with_grads.tolist(), "grad": float(value.grad),  # type: ignore[arg-type]
                            "nested": {k: list(v.shape) for k, v in nested.items()}}
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
    out = {"global_step": trainer.global_step, "gathered": module.gathered, "scalars": module.scalars,
           "rank_zero_only": rank_zero_only.rank,
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


class Buckets(BatchSampler):
    """Batches of samples with equal ``key % 3`` (a bucketing sampler), in an order that depends on the epoch."""

    def __init__(self, keys: list[int], batch_size: int) -> None:
        super().__init__(SequentialSampler(keys), batch_size, drop_last=False)
        self.keys = keys
        self.epochs: list[int] = []
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)
        self.epoch = epoch

    def _batches(self) -> list[list[int]]:
        out: list[list[int]] = []
        for bucket in range(3):
            members = [i for i in self.sampler if self.keys[i] % 3 == bucket]
            out += [members[j:j + self.batch_size] for j in range(0, len(members), self.batch_size)]
        shift = self.epoch % len(out)
        return out[shift:] + out[:shift]

    def __iter__(self) -> Any:
        return iter(self._batches())

    def __len__(self) -> int:
        return len(self._batches())


class Seen(TinyClassifier):
    def __init__(self) -> None:
        super().__init__(features=1)
        self.seen: list[list[int]] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        self.seen.append([int(v) for v in x.reshape(-1)])
        return torch.nn.functional.cross_entropy(self(x), y)


def bucketed(root: str) -> None:
    seed_everything(0)
    keys = list(range(40))
    data = TensorDataset(torch.tensor(keys, dtype=torch.float32).reshape(-1, 1), torch.tensor(keys) % 4)
    sampler = Buckets(keys, batch_size=4)
    module = Seen()
    trainer = quiet(strategy="ddp", max_epochs=2, logger=False)
    trainer.fit(module, DataLoader(data, batch_sampler=sampler))
    out = {"seen": module.seen, "epochs": sampler.epochs, "steps": trainer.global_step,
           "weights": [float(p.sum()) for p in module.parameters()]}
    Path(root, f"bucketed{trainer.global_rank}.json").write_text(json.dumps(out))


class SlowSteps(TinyClassifier):
    """Rank 1 reaches the training loop 0.8 s after rank 0 (so its own clock would give it 0.8 s more)."""

    def on_fit_start(self) -> None:
        if self.global_rank == 1:
            time.sleep(0.8)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        time.sleep(0.05)
        return super().training_step(batch, batch_idx)


def max_time(root: str) -> None:
    seed_everything(0)
    trainer = quiet(strategy="ddp", max_epochs=100, max_time=timedelta(seconds=1.5), logger=False,
                    num_sanity_val_steps=0)
    trainer.fit(SlowSteps(), TinyData(batch_size=8))
    Path(root, f"max_time{trainer.global_rank}.json").write_text(json.dumps({"steps": trainer.global_step}))


if __name__ == "__main__":
    {"ddp": ddp, "ddp_spawn": ddp_spawn, "bucketed": bucketed, "max_time": max_time}[sys.argv[1]](sys.argv[2])
