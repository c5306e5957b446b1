"""Run one matrix group for real: for each precision, train 4 steps saving at step 2, then resume from step 2.

    python matrix_group.py ACCELERATOR STRATEGY DEVICES PRECISIONS OUT

Rank 0 writes ``OUT/<precision>/{a,b}.pt`` (losses and final weights of the uninterrupted and the resumed run).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from xtrain.core import Callback, ModelCheckpoint, Trainer, TrainModule, seed_everything
from xtrain.core.testing import TinyClassifier, tiny_loaders


class Record(Callback):
    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_end(self, trainer: Trainer, module: TrainModule) -> None:
        # Sharded parameters (FSDP's DTensors) are gathered whole; a collective, so every rank takes part.
        weights = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().float().cpu().clone()
                   for k, v in module.state_dict().items()}
        if trainer.is_global_zero:
            torch.save({"losses": list(module.losses), "weights": weights,  # type: ignore[attr-defined]
                        "global_step": trainer.global_step}, self.path)


def run(accelerator: str, strategy: str, devices: int, precision: str, out: Path, ckpt_path: str | None) -> None:
    seed_everything(0)
    train, _ = tiny_loaders(batch_size=16)
    callbacks: list[Any] = [Record(out / ("b.pt" if ckpt_path else "a.pt"))]
    if ckpt_path is None:
        callbacks.append(ModelCheckpoint(dirpath=out / "ckpt", every_n_train_steps=2, save_top_k=-1))
    # XLA keeps bfloat16 intermediates in float32 where graph cuts allow unless asked to round as written, which
    # deterministic=True does; elsewhere these runs are deterministic already.
    trainer = Trainer(accelerator=accelerator, strategy=strategy, devices=devices, precision=precision, max_steps=4,
                      deterministic=accelerator == "xla", logger=False, enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=0,
                      callbacks=callbacks, default_root_dir=out)
    trainer.fit(TinyClassifier(lr=0.2), train, ckpt_path=ckpt_path)


def main(argv: list[str]) -> None:
    accelerator, strategy, devices, precisions, root = argv[0], argv[1], int(argv[2]), argv[3].split(","), Path(argv[4])
    for precision in precisions:
        out = root / precision
        out.mkdir(parents=True, exist_ok=True)
        run(accelerator, strategy, devices, precision, out, None)
        step2 = next((out / "ckpt").glob("*step=2.ckpt"))
        run(accelerator, strategy, devices, precision, out, str(step2))


if __name__ == "__main__":
    main(sys.argv[1:])
