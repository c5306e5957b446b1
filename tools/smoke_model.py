"""The model and data of the smoke scripts (``smoke_*.py``), which run in venvs holding only some xtrain wheels.

``xtrain.core.testing`` needs pytest, which those venvs do not have, so the scripts share this instead.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import TrainModule

__all__ = ["Tiny", "loader"]


class Tiny(TrainModule):
    """A linear classifier that records its training losses."""

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


def loader() -> DataLoader[tuple[torch.Tensor, ...]]:
    """256 seeded samples whose class is the sign of the first feature, in shuffled batches of 32."""
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = (x[:, 0] > 0).long()
    return DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
