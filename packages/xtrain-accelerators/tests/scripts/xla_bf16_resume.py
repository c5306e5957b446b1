"""bf16-true on XLA under deterministic=True: train 4 steps saving at step 2, resume from step 2, compare bitwise.

    python xla_bf16_resume.py OUT

Prints one JSON line: whether the weights are bitwise equal, and XLA_FLAGS as the runtime saw it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from xtrain.core import ModelCheckpoint, Trainer, seed_everything
from xtrain.core.testing import TinyClassifier, tiny_loaders


def fit(out: Path, ckpt_path: str | None) -> dict[str, torch.Tensor]:
    seed_everything(0)
    train, _ = tiny_loaders(batch_size=16)
    callbacks = [] if ckpt_path else [ModelCheckpoint(dirpath=out, every_n_train_steps=2, save_top_k=-1)]
    trainer = Trainer(accelerator="xla", devices=1, precision="bf16-true", max_steps=4, deterministic=True,
                      logger=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                      callbacks=callbacks, default_root_dir=out)
    model = TinyClassifier(lr=0.2)
    trainer.fit(model, train, ckpt_path=ckpt_path)
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def main(out: Path) -> None:
    straight = fit(out, None)
    resumed = fit(out, str(next(out.glob("*step=2.ckpt"))))
    equal = all(torch.equal(straight[k], resumed[k]) for k in straight)
    print(json.dumps({"bitwise_equal": equal, "xla_flags": os.environ.get("XLA_FLAGS", ""),
                      "dtype": str(straight["net.0.weight"].dtype)}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
