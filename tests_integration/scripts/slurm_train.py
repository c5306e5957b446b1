"""A 2-task DDP job for the test cluster (tests_integration/test_slurm.py), started by ``srun`` from ``slurm_job.sh``.

    python slurm_train.py RUN_ROOT [--step-sleep 0.2] [--fail-at STEP]

Each SLURM job trains in its own directory, ``RUN_ROOT/job-<SLURM_JOB_ID>``, and fits with ``ckpt_path="auto"``:
the job id survives a requeue, so a requeued job resumes from the checkpoint its first run wrote; a new job starts
fresh.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from resume_run import Augmented, Momentum  # the model and data of the exact-resume tests, from this directory
from torch.utils.data import DataLoader

from xtrain.core import Callback, ModelCheckpoint, Trainer, TrainModule, seed_everything


class Progress(Callback):
    """Says each step on rank 0 (the test signals the job once it has trained a while), slowed down on purpose so
    that a signal lands mid-run; sleeping changes nothing that is computed."""

    def __init__(self, pause: float, fail_at: int | None = None) -> None:
        self.pause, self.fail_at = pause, fail_at

    def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any, idx: int) -> None:
        if trainer.is_global_zero:
            print(f"step {trainer.global_step}", flush=True)
        if trainer.global_rank == 1 and trainer.global_step == self.fail_at:
            raise RuntimeError(f"rank 1 fails on purpose at step {self.fail_at}")
        time.sleep(self.pause)

    def on_exception(self, trainer: Trainer, module: TrainModule, exception: BaseException) -> None:
        if trainer.global_rank == 1 and self.fail_at is not None:
            time.sleep(3)  # a slow teardown (a logger uploading): srun's SIGTERM comes meanwhile


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--async-checkpoints", action="store_true")
    parser.add_argument("--fail-at", type=int)
    args = parser.parse_args()
    run_dir = args.root / f"job-{os.environ['SLURM_JOB_ID']}"
    checkpoints = run_dir / "checkpoints"
    # The run is this SLURM job (SLURM_JOB_ID survives a requeue): its newest complete checkpoint, or a fresh start.
    resume = "auto"
    seed_everything(11)
    module = Momentum(dropout=0.25)
    loader = DataLoader(Augmented(), batch_size=12, shuffle=True)
    trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=args.epochs, default_root_dir=run_dir,
                      callbacks=[ModelCheckpoint(dirpath=checkpoints, every_n_train_steps=5, save_last=True),
                                 Progress(args.step_sleep, args.fail_at)],
                      plugins=["async"] if args.async_checkpoints else None,
                      logger=False, enable_progress_bar=False, enable_model_summary=False)
    environment = trainer.strategy.cluster_environment
    sys.stdout.write(f"rank {trainer.global_rank}/{trainer.world_size} environment={getattr(environment, 'name', None)} "
                     f"pid={os.getpid()} restart={os.environ.get('SLURM_RESTART_COUNT', '0')} resume={resume}\n")
    sys.stdout.flush()  # the line in one write: print() writes its end apart, and the ranks share the output
    (run_dir / "pids").mkdir(parents=True, exist_ok=True)
    (run_dir / "pids" / f"rank{trainer.global_rank}").write_text(str(os.getpid()))
    trainer.fit(module, loader, ckpt_path=resume)
    if trainer.is_global_zero and trainer.current_epoch == args.epochs:  # not when stopped by preemption
        torch.save({k: v.clone() for k, v in module.state_dict().items()}, run_dir / "final.pt")
        print(f"finished at epoch {trainer.current_epoch} step {trainer.global_step}", flush=True)


if __name__ == "__main__":
    main()
