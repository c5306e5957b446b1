"""The tuner tests' module: its loaders read ``self.batch_size``, and batches above a memory budget fail as a device's
would (the tuners' tests run on the CPU, where nothing runs out of memory)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader

from xtrain.core.testing import TinyClassifier, tiny_dataset


class Budgeted(TinyClassifier):
    """Builds its loaders from ``self.batch_size``; a batch above ``budget`` samples raises the out-of-memory error a
    device would. ``sizes`` records every batch size seen.

    Args:
        budget: The largest batch that fits; ``None``: all do.
        n: Samples in the train (and validation) dataset.
        shuffle: Shuffle the train loader.
        batch_size: The first ``batch_size``.
        lr: SGD's learning rate.
        momentum: SGD's momentum (a state the tuners must leave as it was).
    """

    def __init__(self, budget: int | None = None, *, n: int = 1024, shuffle: bool = False, batch_size: int = 2,
                 lr: float = 0.1, momentum: float = 0.0) -> None:
        super().__init__(lr=lr)
        self.batch_size = batch_size
        self.budget, self.n, self.shuffle, self.momentum = budget, n, shuffle, momentum
        self.sizes: list[int] = []
        self.net.register_forward_pre_hook(self._check_budget)

    def _check_budget(self, module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        self.sizes.append(args[0].shape[0])
        if self.budget is not None and args[0].shape[0] > self.budget:
            raise torch.OutOfMemoryError(f"CUDA out of memory (simulated budget {self.budget})")

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(tiny_dataset(self.n), batch_size=self.batch_size, shuffle=self.shuffle)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(tiny_dataset(self.n, seed=1), batch_size=self.batch_size)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams["lr"], momentum=self.momentum)
