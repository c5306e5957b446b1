"""Resume an FSDP run (2 gloo ranks) from a checkpoint that must be refused; each rank records what it saw.

    python fsdp_restore.py '{"out": DIR, "ckpt": PATH, "classes": N}'

A refused restore fails the run (the launcher stops the other ranks, possibly before they report), so a rank
records what it saw in its ``on_exception`` hook, ``rank<N>.json``: the error's message, and whether its shards of the module are exactly its
part of the weights the module had before the strategy set it up and the checkpoint was read, and its optimizer
holds no state from the checkpoint (only the zeros torch initializes).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from xtrain.core import Callback, Trainer, TrainModule, seed_everything
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


def local(state: Any) -> list[torch.Tensor]:
    """This rank's shards (no collective: the other rank may be gone already)."""
    if isinstance(state, torch.Tensor):
        return [(state.to_local() if hasattr(state, "to_local") else state).detach().clone()]
    if isinstance(state, dict):
        return [t for k in sorted(state, key=str) for t in local(state[k])]
    if isinstance(state, (list, tuple)):
        return [t for v in state for t in local(v)]
    return []


def my_part(whole: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """The slice of ``whole`` FSDP2 gives ``rank`` (dim-0 chunks)."""
    chunks = torch.chunk(whole, world, dim=0)
    return chunks[rank] if rank < len(chunks) else whole[:0]


class Snapshot(Callback):
    """The module's whole weights when the run is set up: before sharding, and before the checkpoint is read."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.before: dict[str, torch.Tensor] = {}

    def setup(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        self.before = {k: v.detach().clone() for k, v in module.state_dict().items()}

    def on_exception(self, trainer: Trainer, module: TrainModule, exception: BaseException) -> None:
        rank, world = trainer.strategy.global_rank, trainer.strategy.world_size
        now = module.state_dict()
        same = now.keys() == self.before.keys() and all(
            torch.equal(local(now[k])[0], my_part(self.before[k], rank, world)) for k in now)
        # torch initializes the optimizer's state (zeros) when it builds the sharded template; nothing else may be set.
        moments = [t for o in trainer.optimizers for state in o.state.values()
                   for name, value in state.items() if name != "step" for t in local(value)]
        fresh = all(int(t.count_nonzero()) == 0 for t in moments)
        record = {"error": f"{type(exception).__name__}: {exception}", "unchanged": same and fresh}
        (self.out / f"rank{rank}.json").write_text(json.dumps(record))


def main(settings: dict[str, Any]) -> None:
    out = Path(settings["out"])
    seed_everything(0)
    trainer = Trainer(accelerator="cpu", devices=2, strategy="fsdp", max_epochs=2, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                      default_root_dir=str(out), num_sanity_val_steps=0, callbacks=[Snapshot(out)])
    trainer.fit(Model(settings["classes"]), DataLoader(tiny_dataset(64), batch_size=8), ckpt_path=settings["ckpt"])


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
