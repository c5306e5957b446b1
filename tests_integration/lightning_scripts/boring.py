"""The smallest complete Lightning program: random vectors, one linear layer, fit then test."""

import os

import torch
from common_summary import hardware, write
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, Dataset


class RandomVectors(Dataset):
    def __init__(self, size: int, length: int) -> None:
        self.data = torch.randn(length, size, generator=torch.Generator().manual_seed(0))

    def __getitem__(self, index):
        return self.data[index]

    def __len__(self) -> int:
        return len(self.data)


class Boring(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        loss = self(batch).sum()
        self.log("train_loss", loss)
        return {"loss": loss}

    def validation_step(self, batch, batch_idx):
        self.log("valid_loss", self(batch).sum())

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self(batch).sum())

    def configure_optimizers(self):
        return torch.optim.SGD(self.layer.parameters(), lr=0.1)


def main() -> None:
    root = os.path.join(os.getcwd(), "boring_run")
    model = Boring()
    trainer = Trainer(default_root_dir=root, max_epochs=2, limit_train_batches=8, limit_val_batches=2,
                      num_sanity_val_steps=0, enable_progress_bar=False, enable_model_summary=False, **hardware())
    trainer.fit(model, train_dataloaders=DataLoader(RandomVectors(32, 64), batch_size=2),
                val_dataloaders=DataLoader(RandomVectors(32, 64), batch_size=2))
    fit_keys = sorted(trainer.callback_metrics)
    trainer.test(model, dataloaders=DataLoader(RandomVectors(32, 16), batch_size=2))
    write(trainer, root, fit_callback_metrics=fit_keys)


if __name__ == "__main__":
    main()
