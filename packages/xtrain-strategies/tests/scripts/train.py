"""A training script the tests start the way users do (python, python -m, torchrun, mpirun, two "nodes").

    python train.py '<json settings>'

Settings: ``out`` (directory for the per-rank records), Trainer hardware arguments (``strategy``, ``devices``,
``num_nodes``, ``accelerator``, ``plugins``), ``max_steps``, ``batch_size``, ``shuffle``, ``fail``
(``{"rank": R, "step": S, "how": "raise"|"sigkill"}``), ``early_stopping``, ``second_fit`` (fit again with twice
the steps), ``manual`` (manual optimization), ``accumulate``, ``epochs``, ``strategy_options`` (keyword arguments
for the registered strategy class), ``scheduler`` (a per-step StepLR), ``uneven`` (rank 0 gets that many extra
batches; no distributed sampler), ``strategy_class`` (``"module:Class"`` to build the strategy from). Each rank
writes ``rank<N>.json`` (at the end of training) and ``after_fit_rank<N>.json`` (after ``fit`` returned).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from xtrain.core import Callback, EarlyStopping, Trainer, TrainModule, seed_everything
from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import TinyClassifier, tiny_dataset


class Model(TinyClassifier):
    def __init__(self, settings: dict[str, Any]) -> None:
        super().__init__(lr=0.05)
        self.settings = settings
        self.seen: list[list[int]] = []
        if settings.get("manual"):
            self.automatic_optimization = False

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        if self.settings.get("scheduler"):
            schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
        return optimizer

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        fail = self.settings.get("fail")
        if fail and self.global_rank == fail["rank"] and self.global_step == fail["step"]:
            Path(self.settings["out"], "failed_at").write_text(repr(time.time()))
            if fail["how"] == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"boom from rank {self.global_rank}")
        x, y, index = batch
        self.seen.append(index.tolist())
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.losses.append(float(loss.detach()))
        self.log("rank_value", float(self.global_rank), sync_dist=True, reduce_fx="sum")
        self.log("rank_metric", float(self.global_rank), on_epoch=True, on_step=False)
        self.log("synced_loss", loss, sync_dist=True, on_epoch=True, on_step=False, prog_bar=True)
        if self.settings.get("manual"):
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
            return None
        return loss


class UnevenModel(Model):
    """Rank 0 has ``uneven`` more batches than the others (Horovod's ``join`` case)."""

    def train_dataloader(self) -> Any:
        s = self.settings
        batch = s.get("batch_size", 8)
        count = s.get("samples", 64) // 2 + (s["uneven"] * batch if self.global_rank == 0 else 0)
        start = self.global_rank * 10_000
        data = torch.utils.data.Subset(Indexed(20_000 + count), range(start, start + count))
        return DataLoader(data, batch_size=batch)


class Indexed(torch.utils.data.Dataset[Any]):
    def __init__(self, n: int) -> None:
        self.data = tiny_dataset(n)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> Any:
        x, y = self.data[i]
        return x, y, i


class Record(Callback):
    def __init__(self, out: Path) -> None:
        self.out = out
        self.epochs: list[int] = []

    def on_train_epoch_start(self, trainer: Trainer, module: TrainModule) -> None:
        self.epochs.append(trainer.current_epoch)

    def on_train_end(self, trainer: Trainer, module: TrainModule) -> None:
        s = trainer.strategy
        params = {k: v.detach().cpu().flatten().tolist() for k, v in module.state_dict().items()}
        gathered = s.all_gather(torch.tensor([float(s.global_rank), 10.0 + s.global_rank]))
        lrs = [group["lr"] for opt in trainer.optimizers for group in opt.param_groups]
        communication = getattr(s, "communication", None)
        record = {"rank": s.global_rank, "lrs": lrs, "communication": vars(communication) if communication else None,
                  "losses": module.losses, "world_size": s.world_size, "local_rank": s.local_rank,
                  "node_rank": s.node_rank, "global_step": trainer.global_step, "params": params,
                  "seen": module.seen, "epochs": self.epochs, "all_gather": gathered.cpu().tolist(),
                  "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
                  "pid": os.getpid(), "state_keys": sorted(s.module_state_dict()), "environment": type(s.cluster_environment).__name__,
                  "strategy": type(s).__name__}
        (self.out / f"rank{s.global_rank}.json").write_text(json.dumps(record))
        with open(self.out / f"pids_rank{s.global_rank}.txt", "a") as f:
            f.write(f"{os.getpid()}\n")


def main(settings: dict[str, Any]) -> None:
    out = Path(settings["out"])
    seed_everything(0)
    torch.set_num_threads(1)
    loader = DataLoader(Indexed(settings.get("samples", 64)), batch_size=settings.get("batch_size", 8),
                        shuffle=settings.get("shuffle", False))
    callbacks: list[Callback] = [Record(out)]
    if settings.get("early_stopping"):
        # Only rank 1 wants to stop (its unsynced metric passes the threshold); all ranks must stop together.
        callbacks.append(EarlyStopping("rank_metric", mode="max", stopping_threshold=0.5, check_on_train_epoch_end=True))
    hardware = {k: settings[k] for k in ("strategy", "devices", "num_nodes", "accelerator", "plugins", "precision") if k in settings}
    if "strategy_options" in settings and "strategy" in settings:
        hardware["strategy"] = STRATEGIES.load(settings["strategy"])(**settings["strategy_options"])
    if "strategy_class" in settings:  # "module:Class", with its options
        module, _, attribute = settings["strategy_class"].partition(":")
        cls = getattr(importlib.import_module(module), attribute)
        hardware["strategy"] = cls(**settings.get("strategy_options", {}))
    trainer = Trainer(max_steps=settings.get("max_steps", 8), max_epochs=settings.get("epochs", -1), logger=False,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                      default_root_dir=str(out), num_sanity_val_steps=0, callbacks=callbacks,
                      accumulate_grad_batches=settings.get("accumulate", 1),
                      use_distributed_sampler=settings.get("use_distributed_sampler", True), **hardware)
    if settings.get("uneven"):
        model: Model = UnevenModel(settings)
        trainer.fit(model)
        return
    model = Model(settings)
    trainer.fit(model, loader)
    if trainer.world_size > 1:  # what fit left in the model, after the strategy's teardown
        communication = getattr(trainer.strategy, "communication", None)
        final = {"params": {k: v.detach().cpu().flatten().tolist() for k, v in model.state_dict().items()},
                 "communication": vars(communication) if communication else None,
                 "rounds": getattr(trainer.strategy, "rounds", None)}
        (out / f"after_fit_rank{trainer.global_rank}.json").write_text(json.dumps(final))
    if settings.get("second_fit"):
        zero = trainer.is_global_zero  # the caller under spawn/fork; rank 0 under the re-exec launcher
        if zero:
            (out / "first_fit_step.txt").write_text(str(trainer.global_step))
            torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out / "first_fit.pt")
        trainer.max_steps = 2 * trainer.max_steps
        trainer.fit(model, loader)
        if zero:
            torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out / "second_fit.pt")
            (out / "second_fit_step.txt").write_text(str(trainer.global_step))
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
            (out / "caller_metrics.json").write_text(json.dumps(metrics))
            (out / "caller_progress_bar.json").write_text(json.dumps(trainer.progress_bar_metrics))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
