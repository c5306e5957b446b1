"""A training driver: best-k checkpoints by a monitored metric, early stopping, TensorBoard, then reload the best."""

import os

import torch
from common_summary import hardware, write
from lightning.pytorch import LightningModule, Trainer, seed_everything
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(LightningModule):
    def __init__(self, hidden: int = 16, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x)

    def _loss(self, batch):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch), sync_dist=True)  # every rank must pick the same best file

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self._loss(batch))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def data(n: int, seed: int) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


def main() -> None:
    seed_everything(3, workers=True)
    root = os.path.join(os.getcwd(), "driver_run")
    checkpoint = ModelCheckpoint(monitor="val_loss", mode="min", save_top_k=2, filename="{epoch}-{val_loss:.2f}")
    stopping = EarlyStopping(monitor="val_loss", patience=2, mode="min", verbose=True)
    trainer = Trainer(default_root_dir=root, max_epochs=3, callbacks=[checkpoint, stopping],
                      logger=TensorBoardLogger(save_dir=root, name="runs"), enable_progress_bar=False,
                      enable_model_summary=False, **hardware())
    trainer.fit(Regressor(hidden=16), data(64, 0), data(32, 1))
    best = Regressor.load_from_checkpoint(checkpoint.best_model_path, map_location="cpu", lr=0.01)
    tested = trainer.test(best, data(32, 2), verbose=False)
    write(trainer, root, best=os.path.basename(checkpoint.best_model_path), reloaded_hidden=best.hparams.hidden,
          reloaded_lr=best.hparams.lr, test_keys=sorted(tested[0]))


if __name__ == "__main__":
    main()
