"""Resume an FSDP run (2 gloo ranks) from a checkpoint that must be refused; each rank records what it saw.

    python fsdp_restore.py '{"out": DIR, "ckpt": PATH, "classes": N}'

Each rank writes ``rank<N>.json``: the CheckpointError's message (or null when the fit ran), whether the module's
full weights are exactly what they were before the strategy set it up (so before the checkpoint was read), and
whether the optimizer holds no state from the checkpoint (all zeros: fresh).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from xtrain.core import Callback, CheckpointError, Trainer, TrainModule, seed_everything
from xtrain.core.testing import tiny_dataset


class Model(TrainModule):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                                       torch.nn.ReLU(), torch.nn.Linear(32, classes))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def full(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Whole tensors (every rank calls it: gathering a DTensor is a collective)."""
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone() for k, v in state.items()}


def tensors(state: Any) -> list[torch.Tensor]:
    if isinstance(state, torch.Tensor):
        return [state.to_local() if hasattr(state, "to_local") else state]
    if isinstance(state, dict):
        return [t for v in state.values() for t in tensors(v)]
    if isinstance(state, (list, tuple)):
        return [t for v in state for t in tensors(v)]
    return []


class Snapshot(Callback):
    """The module's weights when the run is set up, before the strategy shards it and before any restore."""

    def __init__(self) -> None:
        self.before: dict[str, torch.Tensor] = {}

    def setup(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        self.before = full(module.state_dict())


def main(settings: dict[str, Any]) -> None:
    out = Path(settings["out"])
    seed_everything(0)
    snapshot = Snapshot()
    trainer = Trainer(accelerator="cpu", devices=2, strategy="fsdp", max_epochs=2, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                      default_root_dir=str(out), num_sanity_val_steps=0, callbacks=[snapshot])
    model = Model(settings["classes"])
    record: dict[str, Any] = {"error": None, "unchanged": None}
    try:
        trainer.fit(model, DataLoader(tiny_dataset(64), batch_size=8), ckpt_path=settings["ckpt"])
    except CheckpointError as err:
        now = full(model.state_dict())
        fresh = all(int(t.count_nonzero()) == 0 for o in trainer.optimizers for t in tensors(o.state))
        record = {"error": str(err), "unchanged": fresh and now.keys() == snapshot.before.keys() and all(
            torch.equal(now[k], snapshot.before[k]) for k in now)}
    (out / f"rank{trainer.strategy.global_rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
