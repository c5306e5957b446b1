"""One rank of a 2-rank ddp fit started by the test as a launcher would (torchrun's variables); rank 1 raises at
step 3 and then spends seconds in ``on_exception`` (a logger uploading its files, say)."""

from __future__ import annotations

import sys
import time
from typing import Any

from xtrain.core import Callback, Trainer, TrainModule, seed_everything
from xtrain.core.testing import TinyClassifier, tiny_loaders


class FailsSlowly(Callback):
    def on_train_batch_start(self, trainer: Trainer, module: TrainModule, batch: Any, batch_idx: int) -> None:
        if trainer.global_rank == 1 and trainer.global_step == 3:
            raise RuntimeError("rank 1 failed on purpose")

    def on_exception(self, trainer: Trainer, module: TrainModule, exception: BaseException) -> None:
        if trainer.global_rank == 1:
            print("rank 1 in on_exception", flush=True)
            time.sleep(4)


def main(root: str) -> None:
    seed_everything(0)
    trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=3, default_root_dir=root,
                      logger=False, callbacks=[FailsSlowly()], enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(TinyClassifier(), tiny_loaders()[0])


if __name__ == "__main__":
    main(sys.argv[1])
