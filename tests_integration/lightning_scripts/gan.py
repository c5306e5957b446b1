"""A GAN on 2-d points with manual optimization: two optimizers, toggled in turn, training_step without batch_idx."""

import os

import torch
from common_summary import hardware, write
from lightning.pytorch import LightningModule, Trainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class PointsGAN(LightningModule):
    def __init__(self, latent_dim: int = 4, lr: float = 2e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(latent_dim, 16), nn.ReLU(), nn.Linear(16, 2))
        self.discriminator = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, z):
        return self.generator(z)

    def training_step(self, batch):
        (real,) = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(real.shape[0], self.hparams.latent_dim, device=self.device)
        ones = torch.ones(real.shape[0], 1, device=self.device)

        self.toggle_optimizer(opt_g)
        g_loss = nn.functional.binary_cross_entropy_with_logits(self.discriminator(self(z)), ones)
        self.manual_backward(g_loss)
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)

        self.toggle_optimizer(opt_d)
        fake = self(z).detach()
        d_loss = (nn.functional.binary_cross_entropy_with_logits(self.discriminator(real), ones)
                  + nn.functional.binary_cross_entropy_with_logits(self.discriminator(fake), 0 * ones)) / 2
        self.manual_backward(d_loss)
        opt_d.step()
        opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)
        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True)

    def configure_optimizers(self):
        lr = self.hparams.lr
        return [torch.optim.Adam(self.generator.parameters(), lr=lr),
                torch.optim.Adam(self.discriminator.parameters(), lr=lr)]


def main() -> None:
    root = os.path.join(os.getcwd(), "gan_run")
    points = torch.randn(96, 2, generator=torch.Generator().manual_seed(0)) * 0.5 + 2
    trainer = Trainer(default_root_dir=root, max_epochs=2, limit_train_batches=6, enable_progress_bar=False,
                      enable_model_summary=False, **hardware(ddp="ddp_find_unused_parameters_true"))
    trainer.fit(PointsGAN(), DataLoader(TensorDataset(points), batch_size=8))
    write(trainer, root)


if __name__ == "__main__":
    main()
