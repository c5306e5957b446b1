"""One of several runs started together on one logger root (``test_concurrent_versions.py``).

Args: root, gate directory, index, ``fail`` or ``ok``. Waits until the gate directory holds ``go``, so the runs reach
their loggers' setup within milliseconds of each other; prints the run's ``log_dir``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from xtrain.core import CSVLogger, Trainer
from xtrain.core.testing import TinyClassifier, tiny_dataset


class FailsAtOnce(TinyClassifier):
    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        raise RuntimeError("failed at step 0 on purpose")


def main() -> int:
    root, gate, index, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    logger = CSVLogger(root)
    trainer = Trainer(accelerator="cpu", max_steps=4, logger=logger, enable_progress_bar=False,
                      enable_model_summary=False, log_every_n_steps=1)
    module = FailsAtOnce() if mode == "fail" else TinyClassifier()
    loader = DataLoader(tiny_dataset(64), batch_size=16)
    (gate / f"ready-{index}").touch()
    deadline = time.monotonic() + 60
    while not (gate / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    try:
        trainer.fit(module, loader)
    except RuntimeError as err:
        print(f"failed: {err}", flush=True)
    print(f"log_dir={logger.log_dir}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
