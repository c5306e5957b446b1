"""A ddp fit on 2 "nodes" of 1 process each whose checkpoints are on node-local disks: each rank's own folder
(torchrun's variables for ``--nnodes=2``, started externally, as on two machines).

    RANK=r WORLD_SIZE=2 ... python node_local_resume.py OUT EPOCHS CKPT_PATH

Each rank works in ``OUT/node<rank>`` (a relative ``CKPT_PATH`` is read there); ``-`` passes none. Writes
``OUT/rank{r}.json``: the CheckpointError's or ConfigError's type and message if fit raised one, or the epoch and
step it ended at."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

from xtrain.core import CheckpointError, ConfigError, Trainer
from xtrain.core.testing.models import TinyClassifier, tiny_dataset

OUT, EPOCHS, CKPT = Path(sys.argv[1]).resolve(), int(sys.argv[2]), sys.argv[3]


if __name__ == "__main__":
    rank = int(os.environ["RANK"])
    own = OUT / f"node{rank}"
    own.mkdir(exist_ok=True)
    os.chdir(own)
    trainer = Trainer(accelerator="cpu", devices=1, num_nodes=2, strategy="ddp", max_epochs=EPOCHS, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, hang_timeout=60, default_root_dir=".")
    try:
        trainer.fit(TinyClassifier(), DataLoader(tiny_dataset(16), batch_size=4),
                    ckpt_path=None if CKPT == "-" else CKPT)
        result: dict[str, Any] = {"epoch": trainer.current_epoch, "step": trainer.global_step}
    except (CheckpointError, ConfigError) as error:
        result = {"type": type(error).__name__, "error": str(error), "every_rank": error.every_rank}
    (OUT / f"rank{rank}.json").write_text(json.dumps(result))
