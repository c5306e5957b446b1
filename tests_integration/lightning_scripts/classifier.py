"""A classifier logging with sync_dist, a step-wise scheduler given as a dict, a learning-rate monitor, CSV logs."""

import os

import pytorch_lightning as pl
import torch
from common_summary import csv_columns, hardware, write
from pytorch_lightning.callbacks import LearningRateMonitor
from pytorch_lightning.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def blobs(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    centres = torch.randn(4, 8, generator=torch.Generator().manual_seed(7)) * 3
    return TensorDataset(centres[y] + torch.randn(n, 8, generator=g), y)


class Classifier(pl.LightningModule):
    def __init__(self, num_classes: int = 4, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, num_classes))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y), prog_bar=True, sync_dist=True)
        self.log("val_acc", (logits.argmax(-1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1}}


def main() -> None:
    root = os.path.join(os.getcwd(), "classifier_run")
    trainer = pl.Trainer(default_root_dir=root, max_epochs=2, log_every_n_steps=1, num_sanity_val_steps=0,
                         callbacks=[LearningRateMonitor(logging_interval="step")], logger=CSVLogger(root),
                         enable_progress_bar=False, enable_model_summary=False, **hardware())
    model = Classifier()
    trainer.fit(model, DataLoader(blobs(64, 0), batch_size=8, shuffle=True), DataLoader(blobs(32, 1), batch_size=8))
    write(trainer, root, csv_columns=csv_columns(root), lr=trainer.optimizers[0].param_groups[0]["lr"])


if __name__ == "__main__":
    main()
