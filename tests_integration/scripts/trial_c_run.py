"""Two DDP ranks that fail the ways an outside trial (trial C) found misreported.

    python trial_c_run.py '<json settings>'

Settings: ``out`` (directory), ``case``. Cases:

* ``first_step``: rank 1 sleeps in its first training step; ``hang_timeout=6`` with a 20 s process-group timeout
  (4 x 6 = 24 s would come after it).
* ``sigterm_setup``: rank 1 sends itself SIGTERM in ``setup``.
* ``ctrl_c``: rank 0 sends SIGINT to the job's process group at step 3 (Ctrl-C in a terminal).
* ``raise``: rank 1 raises at step 3 (its traceback must be printed once).
* ``check_one_rank``: under ``XTRAIN_COLLECTIVE_CHECK=1`` rank 0 alone logs with ``sync_dist=True`` at step 3.
* ``hang_restart``: rank 1 sleeps at global step 7 on every attempt, ``max_restarts=3``, a checkpoint every 3 steps,
  a validation loader with sanity-check batches (so counted batches differ from the global step).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from xtrain.core import ModelCheckpoint, Trainer
from xtrain.core.testing import TinyClassifier, tiny_dataset

SETTINGS: dict[str, Any] = json.loads(sys.argv[1])
OUT = Path(SETTINGS["out"])
CASE = SETTINGS["case"]


class Model(TinyClassifier):
    def setup(self, stage: str) -> None:
        if CASE == "sigterm_setup" and self.trainer.global_rank == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        super().setup(stage)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        rank, step = self.global_rank, self.global_step
        if CASE == "first_step" and rank == 1 and step == 0:
            time.sleep(100_000)
        if CASE == "ctrl_c" and rank == 0 and step == 3:
            os.killpg(os.getpgid(0), signal.SIGINT)
        if CASE == "raise" and rank == 1 and step == 3:
            raise RuntimeError("boom from rank 1")
        if CASE == "check_one_rank" and rank == 0 and step == 3:
            self.log("only_rank_zero", 1.0, sync_dist=True)
        if CASE == "hang_restart" and rank == 1 and step == 7:
            time.sleep(100_000)
        return super().training_step(batch, batch_idx)

    def train_dataloader(self) -> Any:
        return DataLoader(tiny_dataset(256), batch_size=4)

    def val_dataloader(self) -> Any:
        return DataLoader(tiny_dataset(16), batch_size=4)


def main() -> None:
    from xtrain.strategies import DDPStrategy

    timeout = timedelta(seconds=20) if CASE == "first_step" else timedelta(minutes=30)
    restarts = CASE == "hang_restart"
    trainer = Trainer(accelerator="cpu", devices=2, strategy=DDPStrategy(timeout=timeout), max_steps=40,
                      logger=False, enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=restarts, default_root_dir=str(OUT),
                      hang_timeout=6 if CASE == "first_step" else 4, max_restarts=3 if restarts else 0,
                      num_sanity_val_steps=2 if restarts else 0, limit_val_batches=2 if restarts else 0,
                      val_check_interval=5 if restarts else 1.0,
                      callbacks=[ModelCheckpoint(every_n_train_steps=3, save_top_k=-1)] if restarts else None)
    trainer.fit(Model(), ckpt_path="auto" if restarts else None)


if __name__ == "__main__":
    torch.set_num_threads(1)
    if CASE == "ctrl_c":  # as in a terminal's foreground job (a background job of a script ignores SIGINT)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    main()
