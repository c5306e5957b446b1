"""Rank-dependent callbacks under ``ddp`` on 2 CPU processes, started externally (torchrun's variables).

    RANK=r WORLD_SIZE=2 ... python callbacks_ddp.py OUT

Writes, per rank: EMA and SWA weights of a full run and of a run stopped and resumed from its checkpoint
(``{ema,swa}_{full,resumed}_rank{r}.pt``), the prediction writer's files (``pred_*``), the throughput monitor's
last figures (``throughput_rank{r}.json``), what SpikeDetection saw of a spike on rank 1 only
(``spikes_rank{r}.pt``) and the steps a ``max_overhead`` checkpoint saved at when the ranks' own clocks disagree
(``throttled_rank{r}.json``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from xtrain.core import Callback, ModelCheckpoint, Trainer, TrainModule, seed_everything
from xtrain.core.callbacks import (
    BasePredictionWriter,
    EMAWeightAveraging,
    SpikeDetection,
    StochasticWeightAveraging,
    ThroughputMonitor,
    WeightAveraging,
)
from xtrain.core.testing import TinyClassifier, tiny_dataset, tiny_loaders

AVERAGE_KEY = "weight_averaging"  # where a checkpoint keeps what WeightAveraging saves beside its state_dict

OUT = Path(sys.argv[1])


class WithBatchNorm(TinyClassifier):
    def __init__(self) -> None:
        super().__init__(lr=0.05)
        self.net.insert(1, torch.nn.BatchNorm1d(32))


def trainer(epochs: int, callbacks: list[Any], root: Path, **kwargs: Any) -> Trainer:
    return Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=epochs, callbacks=callbacks,
                   default_root_dir=root, logger=False, enable_progress_bar=False, enable_model_summary=False,
                   num_sanity_val_steps=0, **kwargs)


def averaging_run(name: str, make: Any, module_cls: type[TrainModule]) -> None:
    rank = int(__import__("os").environ["RANK"])
    results = {}
    for run, stops in (("full", [3]), ("resumed", [2, 3])):
        seed_everything(3)
        module = module_cls()
        train, val = tiny_loaders(n=128, batch_size=16)
        root = OUT / f"{name}_{run}"
        path = None
        for epochs in stops:
            averaging: WeightAveraging = make()
            t = trainer(epochs, [averaging, ModelCheckpoint(dirpath=root, save_last=True)], root)
            t.fit(module, train, val, ckpt_path=path)
            path = str(root / "last.ckpt")
        assert averaging.averaged_model is not None
        results[run] = {"module": {k: v.clone() for k, v in module.state_dict().items()},
                        "average": {k: v.clone() for k, v in averaging.averaged_model.state_dict().items()},
                        "num_averaged": averaging.num_averaged,
                        "checkpoint": torch.load(root / "last.ckpt", weights_only=True)["state_dict"],
                        "checkpoint_average": torch.load(root / "last.ckpt", weights_only=True)
                        .get(AVERAGE_KEY, {}).get("average_state_dict")}
        torch.save(results[run], OUT / f"{name}_{run}_rank{rank}.pt")


class Writer(BasePredictionWriter):
    def write_on_batch_end(self, trainer: Trainer, module: TrainModule, prediction: Any,
                           batch_indices: list[int] | None, batch: Any, batch_idx: int, dataloader_idx: int) -> None:
        torch.save({"prediction": prediction, "indices": batch_indices},
                   OUT / f"pred_batch_rank{trainer.global_rank}_{batch_idx}.pt")

    def write_on_epoch_end(self, trainer: Trainer, module: TrainModule, predictions: list[Any],
                           batch_indices: list[list[list[int] | None]]) -> None:
        torch.save({"predictions": predictions, "indices": batch_indices},
                   OUT / f"pred_epoch_rank{trainer.global_rank}.pt")


def predict() -> None:
    seed_everything(5)
    module = TinyClassifier()
    data = DataLoader(tiny_dataset(41, seed=9), batch_size=8)
    trainer(1, [Writer("batch_and_epoch")], OUT / "predict").predict(module, data)
    torch.save(module.state_dict(), OUT / f"pred_module_rank{int(__import__('os').environ['RANK'])}.pt")


def throughput() -> None:
    seed_everything(7)
    monitor = ThroughputMonitor(length_fn=lambda batch: batch[0].numel())
    train, _ = tiny_loaders(n=128, batch_size=16)
    t = trainer(1, [monitor], OUT / "throughput", log_every_n_steps=2, limit_val_batches=0)
    t.fit(TinyClassifier(), train)
    (OUT / f"throughput_rank{t.global_rank}.json").write_text(json.dumps(monitor.last))


class SpikyOnRank1(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        return loss * 1000 if (self.global_rank, self.current_epoch, batch_idx) == (1, 1, 2) else loss


def spikes() -> None:
    seed_everything(9)
    detection = SpikeDetection(mode="skip", window=4, warmup=2)
    module = SpikyOnRank1()
    t = trainer(2, [detection], OUT / "spikes", limit_val_batches=0)
    t.fit(module, tiny_loaders(n=128, batch_size=16)[0])
    torch.save({"spikes": detection.spikes, "weights": module.state_dict(), "steps": t.global_step},
               OUT / f"spikes_rank{t.global_rank}.pt")


class Saves(Callback):
    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_save_checkpoint(self, trainer: Trainer, module: TrainModule, checkpoint: dict[str, Any]) -> None:
        self.steps.append(trainer.global_step)


def throttled() -> None:
    seed_everything(11)
    saves = Saves()
    checkpoint = ModelCheckpoint(dirpath=OUT / "throttled", save_last=True, max_overhead=1e-9)
    rank = int(__import__("os").environ["RANK"])
    if rank == 1:
        checkpoint.MAX_OVERHEAD_WAIT = 0.0  # rank 1's own clock would save every epoch: rank 0's must decide
    t = trainer(5, [saves, checkpoint], OUT / "throttled_root", limit_val_batches=0)
    t.fit(TinyClassifier(), tiny_loaders(n=64, batch_size=16)[0])
    (OUT / f"throttled_rank{rank}.json").write_text(json.dumps(saves.steps))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    averaging_run("ema", lambda: EMAWeightAveraging(decay=0.8), TinyClassifier)
    averaging_run("swa", lambda: StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=2, annealing_epochs=2),
                  WithBatchNorm)
    predict()
    throughput()
    spikes()
    throttled()


if __name__ == "__main__":
    main()
