"""Train, checkpoint and resume under fsdp / ddp / one device, the way users do; each rank records what it saw.

    python fsdp_run.py '<json settings>'

Settings: ``out`` (records directory), ``accelerator`` (default cpu), ``strategy`` (a name) with ``options`` (FSDPStrategy keyword arguments;
class names for the module selectors), ``devices``, ``precision``, ``epochs``, ``batch_size`` (per rank),
``samples``, ``clip``, ``accumulate``, ``ckpt_path`` (resume), ``checkpoint`` (ModelCheckpoint keyword arguments),
``save`` (a path for ``trainer.save_checkpoint`` after fit), ``manual`` (manual optimization), ``inf_on_rank``
(a rank whose gradient gets an inf at step 1, for 16-mixed), ``validate`` (a validation loader and the default
sanity check).

The data is not shuffled, so one global batch is the same samples at any world size (per-rank batch x world):
losses and weights of runs at different world sizes can be compared step by step. Each rank writes
``rank<N>.json`` with the global (all-rank mean) loss of every step and the final full weights.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from xtrain.core import Callback, ModelCheckpoint, Trainer, TrainModule, seed_everything
from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import tiny_dataset


def full(tensor: torch.Tensor) -> torch.Tensor:
    gather = getattr(tensor, "full_tensor", None)
    return gather() if callable(gather) else tensor


def full_params(module: torch.nn.Module) -> dict[str, list[float]]:
    """Every entry of the module's state, gathered whole (sharded entries included), as lists."""
    return {k: full(v.detach()).float().cpu().flatten().tolist() for k, v in sorted(module.state_dict().items())}


class Model(TrainModule):
    def __init__(self, settings: dict[str, Any]) -> None:
        super().__init__()
        self.settings = settings
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                                       torch.nn.ReLU(), torch.nn.Linear(32, 4))
        self.losses: list[float] = []
        if settings.get("manual"):
            self.automatic_optimization = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x).float(), y), sync_dist=True)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        # Reaches a submodule directly, not through self(...): the step runs inside FSDP's root forward anyway.
        loss = torch.nn.functional.cross_entropy(self.net(x).float(), y)
        self.losses.append(float(self.trainer.strategy.reduce(loss.detach(), op="mean")))
        if self.settings.get("manual"):
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
            return None
        return loss

    def on_after_backward(self) -> None:
        if self.settings.get("inf_on_rank") == self.global_rank and self.global_step == 1:
            grad = next(self.parameters()).grad
            assert grad is not None
            local = grad.to_local() if hasattr(grad, "to_local") else grad
            local.view(-1)[0] = float("inf")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.01, weight_decay=0.01)


class Record(Callback):
    def __init__(self, out: Path) -> None:
        self.out = out

    def on_train_end(self, trainer: Trainer, module: TrainModule) -> None:
        s = trainer.strategy
        params = full_params(module)
        scale = getattr(s.precision, "scaler", None)
        record = {"rank": s.global_rank, "world_size": s.world_size, "strategy": type(s).__name__,
                  "global_step": trainer.global_step, "losses": module.losses, "params": params,
                  "param_types": sorted({type(p).__name__ for p in module.parameters()}),
                  "scale": scale.get_scale() if scale is not None else None}
        s.barrier("record")
        (self.out / f"rank{s.global_rank}.json").write_text(json.dumps(record))


def strategy_of(settings: dict[str, Any]) -> Any:
    name = settings.get("strategy", "auto")
    options = settings.get("options")
    if not options:
        return name
    cls = STRATEGIES.load(name)
    return cls(**options)  # type: ignore[operator]


def main(settings: dict[str, Any]) -> None:
    out = Path(settings["out"])
    seed_everything(0)
    torch.set_num_threads(1)
    loader = DataLoader(tiny_dataset(settings.get("samples", 64)), batch_size=settings.get("batch_size", 8))
    callbacks: list[Callback] = [Record(out)]
    if settings.get("checkpoint"):
        callbacks.append(ModelCheckpoint(**settings["checkpoint"]))
    trainer = Trainer(accelerator=settings.get("accelerator", "cpu"), devices=settings.get("devices", 2), strategy=strategy_of(settings),
                      precision=settings.get("precision"), max_epochs=settings.get("epochs", 2), logger=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=bool(settings.get("checkpoint")), default_root_dir=str(out),
                      num_sanity_val_steps=2 if settings.get("validate") else 0, callbacks=callbacks, gradient_clip_val=settings.get("clip"),
                      accumulate_grad_batches=settings.get("accumulate", 1))
    model = Model(settings)
    val = DataLoader(tiny_dataset(16), batch_size=8) if settings.get("validate") else None
    trainer.fit(model, loader, val, ckpt_path=settings.get("ckpt_path"))
    if settings.get("save"):
        trainer.save_checkpoint(settings["save"])


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
