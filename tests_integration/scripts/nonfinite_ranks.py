"""Two DDP ranks; only rank 1's loss becomes inf at chosen batches. Each rank saves its final weights.

Usage: nonfinite_ranks.py OUT_DIR trainer|engine MODE   (MODE: warn, skip, raise, or raise_caught: the Trainer's
"raise" inside the user's try/except NonFiniteLossError, which writes caught<rank>.txt)
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import torch

from xtrain.core import Engine, Trainer, seed_everything
from xtrain.core.errors import NonFiniteLossError
from xtrain.core.testing import TinyClassifier, tiny_loaders

BAD = {1, 3}  # batches (counted over the run) whose loss is inf on rank 1 only


class InfOnRankOne(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.calls += 1
        return loss * math.inf if self.trainer.global_rank == 1 and self.calls - 1 in BAD else loss


def with_trainer(out: Path, mode: str) -> None:
    seed_everything(0)
    trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1, default_root_dir=out,
                      on_nonfinite_loss=mode.removesuffix("_caught"), logger=False, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0)
    model = InfOnRankOne()
    if mode == "raise_caught":  # the user's own except, on every rank (each runs this script)
        try:
            trainer.fit(model, tiny_loaders(n=128)[0])
        except NonFiniteLossError as err:
            (out / f"caught{trainer.global_rank}.txt").write_text(f"{err.every_rank} {err}")
        return
    trainer.fit(model, tiny_loaders(n=128)[0])
    torch.save({"weights": dict(model.state_dict()), "steps": trainer.global_step},
               out / f"rank{trainer.global_rank}.pt")


def with_engine(out: Path, mode: str) -> None:
    engine = Engine(accelerator="cpu", devices=2, strategy="ddp", on_nonfinite_loss=mode)  # type: ignore[arg-type]
    engine.launch()
    torch.manual_seed(0)
    net = torch.nn.Linear(16, 4)
    model, opt = engine.setup(net, torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9))
    loader = engine.setup_dataloaders(tiny_loaders(n=128)[0])
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if engine.global_rank == 1 and i in BAD:
            loss = loss * math.inf
        opt.zero_grad()
        engine.backward(loss)
        opt.step()
    torch.save({"weights": dict(net.state_dict()), "steps": -1}, out / f"rank{engine.global_rank}.pt")


if __name__ == "__main__":
    target, api, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    (with_trainer if api == "trainer" else with_engine)(target, mode)
