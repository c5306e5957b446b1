"""The smallest complete model and data: the starting point of bug reports and of tests of the training loop."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Subset
from typing_extensions import override

from xtrain.core.datamodule import DataModule
from xtrain.core.module import TrainModule

__all__ = ["BoringDataModule", "BoringModel", "RandomDataset"]


class RandomDataset(Dataset[Tensor]):
    """``length`` random vectors of ``size`` features, drawn once so that every epoch sees the same data."""

    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> Tensor:
        return self.data[index]

    def __len__(self) -> int:
        return self.len


class BoringModel(TrainModule):
    """One linear layer (32 -> 2) pulled toward ones; every step, loader and optimizer hook is filled in.

    Subclass it and override the one hook a bug report is about; ``step`` and ``loss`` are the shared pieces.
    """

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)

    @override
    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.layer(x)
        return out

    def loss(self, preds: Tensor, labels: Tensor | None = None) -> Tensor:
        target = torch.ones_like(preds) if labels is None else labels
        return torch.nn.functional.mse_loss(preds, target)

    def step(self, batch: Any) -> Tensor:
        return self.loss(self(batch))

    @override
    def training_step(self, batch: Any, batch_idx: int) -> dict[str, Tensor]:
        return {"loss": self.step(batch)}

    @override
    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, Tensor]:
        return {"x": self.step(batch)}

    @override
    def test_step(self, batch: Any, batch_idx: int) -> dict[str, Tensor]:
        return {"y": self.step(batch)}

    @override
    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]

    def train_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(RandomDataset(32, 64))

    def val_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(RandomDataset(32, 64))

    def test_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(RandomDataset(32, 64))

    def predict_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(RandomDataset(32, 64))


class BoringDataModule(DataModule):
    """256 random vectors cut into four loaders of 64: train, val, test and predict."""

    def __init__(self) -> None:
        super().__init__()
        self.random_full = RandomDataset(32, 64 * 4)

    def _part(self, index: int) -> DataLoader[Tensor]:
        return DataLoader(Subset(self.random_full, range(64 * index, 64 * (index + 1))))

    @override
    def train_dataloader(self) -> DataLoader[Tensor]:
        return self._part(0)

    @override
    def val_dataloader(self) -> DataLoader[Tensor]:
        return self._part(1)

    @override
    def test_dataloader(self) -> DataLoader[Tensor]:
        return self._part(2)

    @override
    def predict_dataloader(self) -> DataLoader[Tensor]:
        return self._part(3)
