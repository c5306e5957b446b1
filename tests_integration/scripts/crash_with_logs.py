"""Two DDP ranks log to TensorBoard every step; rank 1 raises at step 6. Rank 0 is ended by its watchdog."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from xtrain.core import Callback, Logger, TensorBoardLogger, Trainer, TrainModule, seed_everything
from xtrain.core.testing import TinyClassifier, tiny_loaders


class Crash(Callback):
    def on_train_batch_start(self, trainer: Trainer, module: TrainModule, batch: Any, batch_idx: int) -> None:
        if trainer.global_rank == 1 and trainer.global_step == 5:
            raise RuntimeError("rank 1 crashed on purpose")


class BufferedLogger(Logger):
    """Keeps rows in memory and writes them only when flushed, as many third-party loggers do."""

    def __init__(self, root: str) -> None:
        super().__init__(root, name="buffered", version=0)
        self.rows: list[dict[str, float]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.rows.append({"step": step, **metrics})

    def finalize(self, status: str) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / "rows.json").write_text(json.dumps({"status": status, "rows": self.rows}))


def main(root: str) -> None:
    seed_everything(0)
    trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=5, default_root_dir=root,
                      logger=[TensorBoardLogger(root, version=0), BufferedLogger(root)], log_every_n_steps=1,
                      callbacks=[Crash()],
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(TinyClassifier(), tiny_loaders()[0])
    Path(root, "unreachable").write_text("fit returned")


if __name__ == "__main__":
    main(sys.argv[1])
