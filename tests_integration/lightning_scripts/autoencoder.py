"""An autoencoder with a DataModule, configured from the command line by LightningCLI (run=False)."""

import os

import torch
from common_summary import write
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningCLI
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


class AutoEncoder(LightningModule):
    def __init__(self, hidden_dim: int = 8, lr: float = 1e-2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Linear(16, hidden_dim), nn.ReLU())
        self.decoder = nn.Linear(hidden_dim, 16)

    def forward(self, x):
        return self.decoder(self.encoder(x))

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = nn.functional.mse_loss(self(x), x)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        (x,) = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), x))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


class VectorsData(LightningDataModule):
    def __init__(self, batch_size: int = 8, size: int = 96) -> None:
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str) -> None:
        full = TensorDataset(torch.randn(self.hparams.size, 16, generator=torch.Generator().manual_seed(0)))
        self.train_set, self.val_set = random_split(full, [64, self.hparams.size - 64],
                                                    generator=torch.Generator().manual_seed(1))

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)


def main() -> None:
    cli = LightningCLI(AutoEncoder, VectorsData, seed_everything_default=1234, run=False,
                       save_config_kwargs={"overwrite": True})
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    write(cli.trainer, os.path.join(os.getcwd(), cli.trainer.default_root_dir or "."),
          hidden_dim=cli.model.hparams.hidden_dim, batch_size=cli.datamodule.hparams.batch_size)


if __name__ == "__main__":
    main()
