"""Train the tiny model under DDP with ckpt_path="auto"; optionally fail at a step; save the final weights.

    python healing_run.py ROOT OUT [--devices 2] [--max-restarts N] [--auto] [--run-name NAME]
        [--kill-at STEP --kill-rank R]   # SIGKILL that rank once (a marker file in ROOT remembers it happened)
        [--raise-at STEP --raise-rank R] # raise at that step on every attempt (a deterministic bug)
        [--leave-at STEP]                # (torchrun elastic) the rank started with HEAL_LEAVER=1 kills its
                                         # agent and itself, once: its node leaves the job
        [--losses FILE]                  # rank 0 appends "step loss world_size" per step

Each attempt prints "attempt N first step at T" (wall clock) at its first training step, and a failing rank
prints "failing at T" just before it fails, for measuring the time a restart costs.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from xtrain.core import Callback, ModelCheckpoint, Trainer, TrainModule, seed_everything
from xtrain.core.testing import TinyClassifier, tiny_dataset


class Momentum(TinyClassifier):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ExponentialLR(opt, 0.9)}


class Faults(Callback):
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.first = True

    def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any, idx: int) -> None:
        a, step, rank = self.args, trainer.global_step, trainer.global_rank
        if self.first:
            self.first = False
            print(f"attempt {os.environ.get('XTRAIN_RESTART_COUNT', os.environ.get('TORCHELASTIC_RESTART_COUNT'))} "
                  f"first step at {time.time():.3f} (rank {rank}, step {step})", flush=True)
        if a.losses and rank == 0:
            with open(a.losses, "a") as f:
                f.write(f"{step} {float(outputs['loss']) if isinstance(outputs, dict) else float(outputs)} "
                        f"{trainer.world_size}\n")
        marker = Path(a.root) / "failed-once"
        if a.kill_at == step and a.kill_rank == rank and not marker.exists():
            marker.write_text("x")
            print(f"failing at {time.time():.3f}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if a.leave_at == step and os.environ.get("HEAL_LEAVER") and not marker.exists():
            marker.write_text("x")
            print(f"failing at {time.time():.3f}", flush=True)
            os.kill(os.getppid(), signal.SIGKILL)  # the torchrun agent: this "node" leaves for good
            os.kill(os.getpid(), signal.SIGKILL)
        if a.raise_at == step and a.raise_rank == rank:
            raise RuntimeError(f"a deterministic bug at step {step}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("out")
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--max-restarts", type=int, default=0)
    p.add_argument("--auto", action="store_true")
    p.add_argument("--run-name")
    p.add_argument("--kill-at", type=int)
    p.add_argument("--kill-rank", type=int, default=1)
    p.add_argument("--raise-at", type=int)
    p.add_argument("--raise-rank", type=int, default=1)
    p.add_argument("--leave-at", type=int)
    p.add_argument("--losses")
    p.add_argument("--policy", default="keep_per_rank_batch")
    args = p.parse_args()
    seed_everything(11)
    module = Momentum(dropout=0.0)
    loader = DataLoader(tiny_dataset(192), batch_size=12, shuffle=True)
    callbacks: list[Callback] = [ModelCheckpoint(every_n_train_steps=args.every, save_last=True), Faults(args)]
    trainer = Trainer(max_epochs=args.epochs, default_root_dir=args.root, callbacks=callbacks, logger=True,
                      enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=args.devices,
                      strategy="ddp", log_every_n_steps=1, num_sanity_val_steps=0, run_name=args.run_name,
                      max_restarts=args.max_restarts, on_world_size_change=args.policy,
                      num_nodes=int(os.environ.get("GROUP_WORLD_SIZE", "1")))  # elastic: this round's node count
    trainer.fit(module, loader, ckpt_path="auto" if args.auto else None)
    if trainer.is_global_zero:
        torch.save({k: v.clone() for k, v in module.state_dict().items()}, Path(args.out))
        print(f"finished at epoch {trainer.current_epoch} step {trainer.global_step} log dir {trainer.log_dir}",
              flush=True)


if __name__ == "__main__":
    main()
