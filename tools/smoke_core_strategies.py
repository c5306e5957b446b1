"""Run in a venv holding only the xtrain-core and xtrain-strategies wheels and torch.

It trains with ``ddp`` on two CPU processes, and refuses ``bf16-mixed`` with the install line of xtrain-precision.
"""

from __future__ import annotations

import sys
import tempfile

import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import ConfigError, Trainer, TrainModule


class Tiny(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 2)
        self.losses: list[float] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def main() -> None:
    try:
        Trainer(precision="bf16-mixed", accelerator="cpu")
    except ConfigError as err:
        assert "Fix: pip install xtrain-precision" in str(err), err
        print(f"refused as expected: {err}", flush=True)
    else:
        raise AssertionError("bf16-mixed should need xtrain-precision")
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = (x[:, 0] > 0).long()
    module = Tiny()
    with tempfile.TemporaryDirectory() as root:
        trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=3, default_root_dir=root,
                          enable_progress_bar=False, enable_model_summary=False, logger=False)
        trainer.fit(module, DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True))
        assert trainer.world_size == 2
    assert module.losses[-1] < module.losses[0], module.losses
    if trainer.is_global_zero:
        print(f"ddp on 2 processes with xtrain-core + xtrain-strategies: loss {module.losses[0]:.3f} -> "
              f"{module.losses[-1]:.3f}", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
