"""Train the tiny model; optionally kill or signal itself at a step; save the final weights.

    python resume_run.py ROOT OUT --epochs 3 [--workers 2] [--every 5] [--kill-at 13] [--signal-at 13 --signal TERM
        --signal-rank 1]
        [--resume] [--strategy ddp --devices 2]
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from xtrain.core import Callback, ModelCheckpoint, Trainer, TrainModule, seed_everything
from xtrain.core.testing import TinyClassifier, tiny_dataset


class Augmented(Dataset[Any]):
    """Adds random noise per sample: data loading consumes the RNG, in the main process or in workers."""

    def __init__(self) -> None:
        self.data = tiny_dataset(192)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> Any:
        x, y = self.data[index]
        return x + 0.1 * torch.randn_like(x), y


class Momentum(TinyClassifier):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ExponentialLR(opt, 0.9)}


class Interrupt(Callback):
    def __init__(self, step: int, signum: int, rank: int = 0) -> None:
        self.step, self.signum, self.rank = step, signum, rank

    def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any, idx: int) -> None:
        if trainer.global_step == self.step and trainer.global_rank == self.rank:
            print(f"interrupting at step {trainer.global_step}", flush=True)
            # The last save's fsync and rename run on a background thread; on a loaded machine they could still be
            # pending at the kill, and the test checks which checkpoint the kill left (the previous one would be
            # correct too, but not the case this test is about).
            trainer.strategy.checkpoint_io.settle()
            os.kill(os.getpid(), self.signum)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("out")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--kill-at", type=int)
    p.add_argument("--signal-at", type=int)
    p.add_argument("--signal", default="TERM")
    p.add_argument("--signal-rank", type=int, default=0)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--strategy", default="auto")
    p.add_argument("--devices", type=int, default=1)
    args = p.parse_args()
    seed_everything(11)
    module = Momentum(dropout=0.25)
    loader = DataLoader(Augmented(), batch_size=12, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.workers > 0)
    callbacks: list[Callback] = [ModelCheckpoint(every_n_train_steps=args.every, save_last=True, save_top_k=-1)]
    if args.kill_at is not None:
        callbacks.append(Interrupt(args.kill_at, signal.SIGKILL))
    if args.signal_at is not None:
        callbacks.append(Interrupt(args.signal_at, getattr(signal, f"SIG{args.signal}"), args.signal_rank))
    trainer = Trainer(max_epochs=args.epochs, default_root_dir=args.root, callbacks=callbacks,
                      logger=True, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                      devices=args.devices, strategy=args.strategy, log_every_n_steps=1)
    trainer.fit(module, loader, ckpt_path="last" if args.resume else None)
    if trainer.is_global_zero:
        torch.save({k: v.clone() for k, v in module.state_dict().items()}, Path(args.out))
        print(f"finished at epoch {trainer.current_epoch} step {trainer.global_step}", flush=True)


if __name__ == "__main__":
    main()
