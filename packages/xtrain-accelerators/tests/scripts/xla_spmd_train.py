"""Trains under ``xla_spmd`` on every XLA CPU device and, in the same process, the same steps on the CPU.

Run with ``PJRT_DEVICE=CPU CPU_NUM_DEVICES=2``. Prints one JSON line: the largest parameter difference between the
two runs, the losses, and the sharding torch_xla recorded for the batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).parent))

from xla_model import LeanClassifier, flat_params

from xtrain.core import Callback, Trainer, seed_everything
from xtrain.core.testing import tiny_dataset


class Record(Callback):
    def __init__(self) -> None:
        self.shardings: list[str] = []
        self.devices: list[str] = []

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        import torch_xla

        self.shardings.append(torch_xla._XLAC._get_xla_sharding_spec(batch[0]))
        self.devices.append(str(batch[0].device))


def train(accelerator: str, strategy: str, devices: Any, callbacks: list[Callback]) -> LeanClassifier:
    seed_everything(0)
    module = LeanClassifier()
    # 100 samples in batches of 16: the last batch (4) is uneven across devices on purpose.
    loader = DataLoader(tiny_dataset(100), batch_size=16, shuffle=False)
    trainer = Trainer(accelerator=accelerator, strategy=strategy, devices=devices, max_epochs=2, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      callbacks=callbacks)
    trainer.fit(module, loader)
    assert trainer.global_step == 14, trainer.global_step
    return module


def main() -> None:
    record = Record()
    spmd = train("xla", "xla_spmd", -1, [record])
    cpu = train("cpu", "single_device", 1, [])
    import torch_xla.runtime as xr

    diff = float((flat_params(spmd) - flat_params(cpu)).abs().max())
    print(json.dumps({"max_param_diff": diff, "shardings": sorted(set(record.shardings)),
                      "batch_devices": sorted(set(record.devices)),
                      "runtime_devices": xr.global_runtime_device_count()}))


if __name__ == "__main__":
    main()
