"""A model for the XLA scripts: no host reads in the step, so one graph per training step is what the loop makes."""

from __future__ import annotations

from typing import Any

import torch

from xtrain.core import TrainModule

__all__ = ["LeanClassifier", "flat_params"]


class LeanClassifier(TrainModule):
    """The tiny MLP of the conformance kit, logging its loss as a tensor (no ``float(loss)`` per step)."""

    def __init__(self, features: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(features, 32), torch.nn.ReLU(), torch.nn.Linear(32, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def flat_params(module: torch.nn.Module) -> torch.Tensor:
    """Every parameter, on the CPU, in one vector (runs whatever XLA work is pending)."""
    return torch.cat([p.detach().cpu().reshape(-1) for p in module.parameters()])
