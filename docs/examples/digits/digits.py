"""A classifier for the 8x8 handwritten digits that scikit-learn ships (1,797 images, 10 classes)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import DataModule, TrainModule


class DigitsData(DataModule):
    """scikit-learn's digits, scaled to [0, 1], split 80/20 with a fixed seed.

    Args:
        batch_size: Batch size of both dataloaders.
        val_fraction: Share of the images kept for validation.
        num_workers: Dataloader worker processes.
    """

    def __init__(self, batch_size: int = 64, val_fraction: float = 0.2, num_workers: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.val_fraction = val_fraction
        self.num_workers = num_workers

    def setup(self, stage: str) -> None:
        from sklearn.datasets import load_digits

        digits = load_digits()
        x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
        y = torch.tensor(digits.target, dtype=torch.long)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
        n_val = int(len(x) * self.val_fraction)
        self.val = TensorDataset(x[order[:n_val]], y[order[:n_val]])
        self.train = TensorDataset(x[order[n_val:]], y[order[n_val:]])

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val, batch_size=256, num_workers=self.num_workers)

    def test_dataloader(self) -> DataLoader[Any]:
        return self.val_dataloader()


class DigitsClassifier(TrainModule):
    """An MLP 64-hidden-hidden-10 with dropout, trained with AdamW and a cosine learning-rate schedule.

    Args:
        hidden: Width of the two hidden layers.
        dropout: Dropout probability.
        lr: Peak learning rate.
        weight_decay: AdamW weight decay.
    """

    def __init__(self, hidden: int = 128, dropout: float = 0.1, lr: float = 3e-3, weight_decay: float = 1e-4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Dropout(dropout),
            torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Dropout(dropout),
            torch.nn.Linear(hidden, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def _evaluate(self, batch: Any, stage: str) -> None:
        x, y = batch
        logits = self(x)
        self.log(f"{stage}_loss", torch.nn.functional.cross_entropy(logits, y), prog_bar=True, sync_dist=True)
        self.log(f"{stage}_acc", (logits.argmax(-1) == y).float().mean(), prog_bar=True, sync_dist=True)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        epochs = max(self.trainer.max_epochs, 1)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}
