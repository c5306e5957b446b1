"""Small models and data for tests and conformance checks: quick, deterministic, and learnable."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core.datamodule import DataModule
from xtrain.core.module import TrainModule

__all__ = ["TinyClassifier", "TinyData", "tiny_dataset", "tiny_loaders"]


def tiny_dataset(n: int = 256, *, features: int = 16, classes: int = 4, seed: int = 0) -> TensorDataset:
    """Gaussian blobs around fixed class centres: a model trained a few steps clearly lowers its loss.

    The centres are the same for every ``seed`` (one task); ``seed`` only draws the samples.
    """
    centers = torch.randn(classes, features, generator=torch.Generator().manual_seed(1234)) * 3
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, features, generator=g)
    return TensorDataset(x, y)


def tiny_loaders(*, batch_size: int = 16, n: int = 256, shuffle: bool = True, num_workers: int = 0,
                 seed: int = 0) -> tuple[DataLoader[Any], DataLoader[Any]]:
    """Train and validation dataloaders over :func:`tiny_dataset`."""
    train = DataLoader(tiny_dataset(n, seed=seed), batch_size=batch_size, shuffle=shuffle, num_workers=num_workers)
    val = DataLoader(tiny_dataset(n // 4, seed=seed + 1), batch_size=batch_size)
    return train, val


class TinyClassifier(TrainModule):
    """A two-layer MLP classifier that logs ``train_loss`` and ``val_loss`` and records what it saw.

    Args:
        lr: SGD learning rate.
        dropout: Dropout probability (exercises the RNG in exact-resume tests).
        features: Input size.
        classes: Number of classes.
    """

    def __init__(self, lr: float = 0.1, dropout: float = 0.0, features: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(features, 32), torch.nn.ReLU(), torch.nn.Dropout(dropout),
                                       torch.nn.Linear(32, classes))
        self.losses: list[float] = []
        self.param_dtypes: set[torch.dtype] = set()
        self.activation_dtypes: set[torch.dtype] = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        self.activation_dtypes.add(logits.dtype)
        self.param_dtypes.add(next(self.parameters()).dtype)
        loss = torch.nn.functional.cross_entropy(logits.float(), y)
        self.losses.append(float(loss.detach()))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", torch.nn.functional.cross_entropy(logits.float(), y), prog_bar=True)
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("test_loss", torch.nn.functional.cross_entropy(logits.float(), y))
        self.log("test_acc", (logits.argmax(-1) == y).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class TinyData(DataModule):
    """:func:`tiny_dataset` as a DataModule (for the CLI and config-driven tests).

    Args:
        batch_size: Batch size of every dataloader.
        n: Training samples (validation and test get a quarter of it each).
        num_workers: Dataloader worker processes.
    """

    def __init__(self, batch_size: int = 16, n: int = 256, num_workers: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.batch_size, self.n, self.num_workers = batch_size, n, num_workers

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(tiny_dataset(self.n), batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(tiny_dataset(self.n // 4, seed=1), batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(tiny_dataset(self.n // 4, seed=2), batch_size=self.batch_size)

    def predict_dataloader(self) -> DataLoader[Any]:
        return self.test_dataloader()
