"""Trains under the multi-process ``xla`` strategy with one device: a worker process started by torch_xla trains,
and the Trainer in this process receives its final state. Run with ``PJRT_DEVICE=CPU CPU_NUM_DEVICES=1``.

Prints one JSON line: this process's pid, the pids that ran training steps, whether this process's module equals the
worker's final weights, and the global step after a second ``fit``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).parent))

from xla_model import LeanClassifier, flat_params

from xtrain.core import Callback, Trainer, seed_everything
from xtrain.core.testing import tiny_dataset


class Record(Callback):
    """Writes, from the worker, its pid, its device and its final weights."""

    def __init__(self, out: str) -> None:
        self.out = out

    def on_train_end(self, trainer: Any, module: Any) -> None:
        torch.save({"pid": os.getpid(), "device": str(trainer.strategy.root_device),
                    "world_size": trainer.world_size, "params": flat_params(module)}, self.out)


def main(out_dir: str) -> None:
    seed_everything(0)
    module = LeanClassifier()
    loader = DataLoader(tiny_dataset(64), batch_size=16, shuffle=True)
    first, second = str(Path(out_dir) / "first.pt"), str(Path(out_dir) / "second.pt")
    trainer = Trainer(accelerator="xla", strategy="xla", devices=1, max_steps=4, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[Record(first)])
    trainer.fit(module, loader)
    worker = torch.load(first, weights_only=True)
    received = bool(torch.equal(flat_params(module), worker["params"]))
    trainer.max_steps = 8
    trainer.callbacks[0].out = second  # type: ignore[attr-defined]
    trainer.fit(module, loader)
    again = torch.load(second, weights_only=True)
    print(json.dumps({"parent_pid": os.getpid(), "worker_pids": [worker["pid"], again["pid"]],
                      "worker_device": worker["device"], "world_size": worker["world_size"],
                      "parent_has_worker_weights": received, "global_step_after_second_fit": trainer.global_step,
                      "parent_device": str(next(module.parameters()).device),
                      "second_fit_changed_weights": not bool(torch.equal(worker["params"], again["params"]))}))


if __name__ == "__main__":
    main(sys.argv[1])
