"""Two ranks that hang the way real runs do; the hang watchdog must report where and end every process.

    python hang_run.py '<json settings>'

Settings: ``out`` (directory), ``case``, ``hang_timeout``, ``engine`` (drive the Engine instead of the Trainer) and
Trainer hardware arguments (``strategy``, ``devices``, ``num_nodes``). Cases that hang (each writes ``stuck_at``,
the time it stopped, just before):

* ``sleep``: rank 1 sleeps in ``training_step`` at step 5.
* ``worker``: rank 0's dataloader worker blocks forever in ``__getitem__``.
* ``sync_dist``: rank 0 alone logs with ``sync_dist=True`` at step 5.
* ``barrier``: rank 0 alone enters a barrier at step 5.
* ``validation``: rank 1 sleeps in ``validation_step`` (second batch of the first validation).
* ``frozen``: rank 1 sleeps in C code that holds the GIL, so not even its watchdog thread runs.

Cases that must finish (exit 0): ``first_step`` (every rank's first step takes 20 s), ``slow_save`` (rank 0 writes
a checkpoint for 20 s, chunk by chunk, while rank 1 waits in the barrier after it), ``slow_steps`` (six steps of
3 s each), ``preempt`` (rank 1 gets SIGTERM at step 5: the run saves ``last.ckpt`` on the slow disk and stops).
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from xtrain.core import Callback, Trainer, TrainModule
from xtrain.core.defaults.torch_io import TorchCheckpointIO, atomic_write
from xtrain.core.testing import TinyClassifier, tiny_dataset

SETTINGS: dict[str, Any] = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
OUT = Path(SETTINGS.get("out", "."))
CASE = SETTINGS.get("case", "none")


def stuck() -> None:
    (OUT / "stuck_at").write_text(repr(time.time()))


class Data(Dataset[Any]):
    def __init__(self, n: int, block: bool) -> None:
        self.data = tiny_dataset(n)
        self.block = block
        self.calls = 0

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> Any:
        self.calls += 1
        if self.block and self.calls > 40:
            stuck()
            time.sleep(100_000)  # HANG: worker (a read that never returns, a deadlocked library)
        return self.data[i]


class Model(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        rank, step = self.global_rank, self.global_step
        if CASE == "sleep" and rank == 1 and step == 5:
            stuck()
            time.sleep(100_000)  # HANG: sleep
        if CASE == "frozen" and rank == 1 and step == 5:
            stuck()
            ctypes.PyDLL(None).sleep(100_000)  # HANG: frozen (C code that keeps the GIL: no thread of it runs)
        if CASE == "sync_dist" and rank == 0 and step == 5:
            stuck()
            self.log("only_rank_zero", 1.0, sync_dist=True)  # HANG: sync_dist
        if CASE == "barrier" and rank == 0 and step == 5:
            stuck()
            self.trainer.strategy.barrier("only on rank 0")  # HANG: barrier
        if CASE == "first_step" and step == 0:
            time.sleep(20)
        if CASE == "slow_steps" and 1 <= step <= 6:
            time.sleep(3)
        if CASE == "preempt" and rank == 1 and step == 5:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        if CASE == "validation" and self.global_rank == 1 and batch_idx == 1:
            stuck()
            time.sleep(100_000)  # HANG: validation
        return super().validation_step(batch, batch_idx)

    def train_dataloader(self) -> Any:
        workers = 1 if CASE == "worker" else 0
        return DataLoader(Data(512, block=CASE == "worker" and self.global_rank == 0), batch_size=4,
                          num_workers=workers)

    def val_dataloader(self) -> Any:
        return DataLoader(Data(32, block=False), batch_size=4)


class SlowDisk(TorchCheckpointIO):
    """Writes the checkpoint in 40 pieces, 0.5 s apart: a 20 s save on a slow disk that keeps writing."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any) -> None:
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        data = buffer.getvalue()
        piece = len(data) // 40 + 1

        def write(f: Any) -> None:
            for start in range(0, len(data), piece):
                time.sleep(0.5)
                f.write(data[start:start + piece])

        atomic_write(path, write)


class SaveAtStep(Callback):
    def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if trainer.global_step == 5:
            trainer.save_checkpoint(OUT / "slow.ckpt")


def train() -> None:
    hardware = {k: SETTINGS[k] for k in ("strategy", "devices", "num_nodes") if k in SETTINGS}
    finishes = CASE in ("first_step", "slow_save", "slow_steps", "preempt", "none")
    slow_disk = CASE in ("slow_save", "preempt")
    trainer = Trainer(accelerator="cpu", max_steps=12 if finishes else 100_000, max_epochs=-1, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                      num_sanity_val_steps=0, default_root_dir=str(OUT), hang_timeout=SETTINGS["hang_timeout"],
                      limit_train_batches=40 if CASE == "validation" else 1.0,
                      plugins=[SlowDisk()] if slow_disk else None,
                      callbacks=[SaveAtStep()] if CASE == "slow_save" else None, **hardware)
    trainer.fit(Model())
    (OUT / f"finished_rank{trainer.global_rank}").write_text("1")


def engine_main(engine: Any) -> None:
    model = torch.nn.Linear(16, 4)
    model, optimizer = engine.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    loader = engine.setup_dataloaders(DataLoader(Data(512, block=False), batch_size=4))
    for step, (x, y) in enumerate(loader):
        if CASE == "sleep" and engine.global_rank == 1 and step == 5:
            stuck()
            time.sleep(100_000)  # HANG: engine
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        engine.backward(loss)
        optimizer.step()


def main() -> None:
    if SETTINGS.get("engine"):
        from xtrain.core import Engine

        engine = Engine(accelerator="cpu", devices=2, strategy=SETTINGS.get("strategy", "ddp"),
                        hang_timeout=SETTINGS["hang_timeout"])
        engine.launch(engine_main)
        return
    train()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
