"""Two ranks under ``XTRAIN_COLLECTIVE_CHECK=1``: collectives in another order are reported, matching ones run.

    python collective_check_run.py '<json settings>'

Settings: ``out`` (directory), ``case`` and Trainer hardware arguments (``strategy``, ``devices``).

* ``order``: at step 3, rank 0 reduces then waits in a barrier; rank 1 does the same in the other order. Each rank
  writes the message of the error it got to ``mismatch_rank<N>``.
* ``match``: every step logs with ``sync_dist=True`` and gathers; at the end of training each rank writes
  ``finished_rank<N>`` with how many collectives the check compared (and, with ``bench``, microseconds per
  ``strategy.reduce`` of one float with the check on and off, interleaved).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from xtrain.core import Callback, Trainer
from xtrain.core._internal.progress_signal import PROGRESS
from xtrain.core.errors import CollectiveMismatchError
from xtrain.core.testing import TinyClassifier, tiny_dataset

SETTINGS: dict[str, Any] = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
OUT = Path(SETTINGS.get("out", "."))
CASE = SETTINGS.get("case", "match")


class Model(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        strategy = self.trainer.strategy
        if CASE == "order" and self.global_step == 3:
            if self.global_rank == 0:
                strategy.reduce(torch.ones(2))  # ORDER: rank 0 first
                strategy.barrier("after the reduce")
            else:
                strategy.barrier("before the reduce")  # ORDER: rank 1 first
                strategy.reduce(torch.ones(2))
        if CASE == "match":
            self.log("rank", float(self.global_rank), sync_dist=True)
            strategy.all_gather(torch.full((3,), float(self.global_rank)))
        return super().training_step(batch, batch_idx)

    def train_dataloader(self) -> Any:
        return DataLoader(tiny_dataset(128), batch_size=4)


class Record(Callback):
    def on_exception(self, trainer: Trainer, module: Any, exception: BaseException) -> None:
        if isinstance(exception, CollectiveMismatchError):
            (OUT / f"mismatch_rank{trainer.global_rank}").write_text(str(exception))

    def on_train_end(self, trainer: Trainer, module: Any) -> None:
        record: dict[str, Any] = {"checked": getattr(PROGRESS.checker, "checked", 0)}
        if SETTINGS.get("bench"):
            record["bench"] = bench(trainer.strategy)
        (OUT / f"finished_rank{trainer.global_rank}").write_text(json.dumps(record))


def bench(strategy: Any, rounds: int = 5, calls: int = 200) -> dict[str, list[float]]:
    """Microseconds per ``strategy.reduce`` of one float, with the check on and off, interleaved."""
    checker, times = PROGRESS.checker, {"on": [], "off": []}
    value = torch.ones(1)
    for _ in range(rounds):
        for arm in ("off", "on"):
            PROGRESS.checker = checker if arm == "on" else None
            strategy.barrier()
            start = time.perf_counter()
            for _ in range(calls):
                strategy.reduce(value)
            times[arm].append((time.perf_counter() - start) / calls * 1e6)
    PROGRESS.checker = checker
    return times


def main() -> None:
    hardware = {k: SETTINGS[k] for k in ("strategy", "devices") if k in SETTINGS}
    trainer = Trainer(accelerator="cpu", max_steps=8, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
                      default_root_dir=str(OUT), callbacks=[Record()], **hardware)
    trainer.fit(Model())


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
