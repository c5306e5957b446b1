"""User code as a strict user writes it, type-checked (``nox -s types``: ``mypy --strict --warn-unused-ignores``).

Not a pytest file: mypy reads it. Every line that is correct must check clean against xtrain's annotations (each
was a false positive found by an outside trial beside Lightning 2.6.6), and every ``# type: ignore[...]`` marks a
mistake the annotations must catch: if one stops being an error, ``--warn-unused-ignores`` fails the session.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, assert_type

import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import Callback, CSVLogger, DataModule, Engine, TensorBoardLogger, Trainer, TrainModule
from xtrain.core.callbacks import EarlyStopping, ModelCheckpoint
from xtrain.core.loggers import Logger, MLFlowLogger, WandbLogger
from xtrain.core.profilers import SimpleProfiler


class Model(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(2, 1)

    def training_step(self, batch: tuple[torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss: torch.Tensor = self.net(batch[0]).pow(2).mean()
        self.log("loss", loss, reduce_fx="avg")  # Lightning's spellings are accepted at run time
        self.log("peak", loss, reduce_fx="MAX", on_epoch=True)
        return loss

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        return -1 if batch_idx > 10 else None  # -1 ends the epoch, as in Lightning

    def configure_callbacks(self) -> Sequence[Callback] | Callback:
        return (ModelCheckpoint(), EarlyStopping("loss"))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def mistakes(self, loss: torch.Tensor) -> None:
        self.log("text", "oops")  # type: ignore[arg-type]
        self.log("list", [1, 2])  # type: ignore[arg-type]


class OneCallback(TrainModule):
    def configure_callbacks(self) -> Callback:
        return ModelCheckpoint()


class LightningNamedCallback(Callback):
    """Lightning's parameter names (``pl_module``, ``state_dict``) override xtrain's hooks (positional-only)."""

    def on_train_epoch_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        pass

    def on_train_batch_end(self, trainer: Trainer, pl_module: TrainModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        pass

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


class Checkpointing(ModelCheckpoint):
    def on_validation_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        super().on_validation_end(trainer, pl_module)


class Data(DataModule):
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)


class MyBoard(TensorBoardLogger):  # the lazily imported loggers are real classes to a type checker
    pass


def trainers() -> None:
    loggers = [CSVLogger("runs"), CSVLogger("more")]
    Trainer(logger=loggers)  # a list of a Logger subclass (list is invariant: Sequence[Logger] takes it)
    Trainer(logger=(CSVLogger("runs"),))
    callbacks = [ModelCheckpoint(), ModelCheckpoint(monitor="loss")]
    Trainer(callbacks=callbacks)
    board: Logger = TensorBoardLogger("runs")
    assert_type(MLFlowLogger, type[MLFlowLogger])
    assert_type(WandbLogger, type[WandbLogger])
    SimpleProfiler(dirpath=3)  # type: ignore[arg-type]
    TensorBoardLogger(save_dir=1.5)  # type: ignore[arg-type]
    del board
    trainer = Trainer(max_epochs=1)
    assert_type(trainer.logged_metrics, dict[str, torch.Tensor])
    assert_type(trainer.callback_metrics, dict[str, torch.Tensor])
    assert_type(Model.load_from_checkpoint("model.ckpt"), Model)
    Trainer(max_epoch=3)  # type: ignore[call-arg]


def engines() -> None:
    def work(engine: Engine) -> float:
        return 42.0

    result: float = Engine(accelerator="cpu").launch(work)
    assert_type(Engine(accelerator="cpu").launch(), None)
    Engine(devices=1.5)  # type: ignore[arg-type]
    Engine(accelerator=3)  # type: ignore[arg-type]
    del result
