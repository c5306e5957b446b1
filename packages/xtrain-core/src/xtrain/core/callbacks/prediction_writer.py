"""Writing predictions to disk as they are made, from every rank."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from typing_extensions import override

from xtrain.core.callbacks.callback import Callback
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["BasePredictionWriter"]

WriteInterval = Literal["batch", "epoch", "batch_and_epoch"]


def _batch_indices(loader: Any) -> list[list[int]] | None:
    """The dataset indices of each batch ``loader`` yields, when its batch sampler is a plain, repeatable one."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    if batch_sampler is None:
        return None
    try:
        return [list(batch) for batch in batch_sampler]
    except TypeError:
        return None


class BasePredictionWriter(Callback):
    """Base class for writing ``trainer.predict`` outputs to files instead of holding them all in memory.

    Every rank runs the callback on its own shard and writes its own part, so a subclass writes to a per-rank file
    (for example ``f"predictions_{trainer.global_rank}.pt"``). ``batch_indices`` are the dataset indices of the
    samples in a batch (``None`` when the dataloader's sampler cannot tell), which lets the parts be put back in order.
    Under a multi-process strategy each sample is predicted by exactly one rank, as in Lightning: the shards are not
    padded, so when the dataset's size is not a multiple of the number of ranks some ranks get one sample fewer.

    Args:
        write_interval: Call :meth:`write_on_batch_end` after each batch, :meth:`write_on_epoch_end` once at the end,
            or both.
    """

    def __init__(self, write_interval: WriteInterval = "batch") -> None:
        if write_interval not in ("batch", "epoch", "batch_and_epoch"):
            raise ConfigError("write_interval", write_interval, "is not a BasePredictionWriter interval.",
                              choices=["batch", "epoch", "batch_and_epoch"], fix="write write_interval='batch'.")
        self.write_interval = write_interval
        self._indices: list[list[list[int]] | None] = []
        self._predictions: list[list[Any]] = []
        self._batch_indices: list[list[list[int] | None]] = []

    def write_on_batch_end(self, trainer: Trainer, module: TrainModule, prediction: Any,
                           batch_indices: list[int] | None, batch: Any, batch_idx: int, dataloader_idx: int) -> None:
        """Write one batch's predictions."""
        raise NotImplementedError(f"{type(self).__name__} must implement write_on_batch_end.")

    def write_on_epoch_end(self, trainer: Trainer, module: TrainModule, predictions: list[Any],
                           batch_indices: list[list[list[int] | None]]) -> None:
        """Write all of this rank's predictions, one entry per batch (with several dataloaders, one such list per
        dataloader, as Lightning passes them); ``batch_indices`` always has one list per dataloader."""
        raise NotImplementedError(f"{type(self).__name__} must implement write_on_epoch_end.")

    @override
    def on_predict_epoch_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        loaders = trainer._eval_loaders  # the loaders the predict loop runs, one per dataloader_idx
        self._indices = [_batch_indices(loader) for loader in loaders]
        self._predictions = [[] for _ in loaders]
        self._batch_indices = [[] for _ in loaders]

    def _indices_of(self, batch_idx: int, dataloader_idx: int) -> list[int] | None:
        found = self._indices[dataloader_idx] if dataloader_idx < len(self._indices) else None
        return found[batch_idx] if found is not None and batch_idx < len(found) else None

    @override
    def on_predict_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any, batch_idx: int,
                             dataloader_idx: int = 0, /) -> None:
        indices = self._indices_of(batch_idx, dataloader_idx)
        if self.write_interval in ("batch", "batch_and_epoch"):
            self.write_on_batch_end(trainer, module, outputs, indices, batch, batch_idx, dataloader_idx)
        if self.write_interval in ("epoch", "batch_and_epoch"):
            self._predictions[dataloader_idx].append(outputs)
            self._batch_indices[dataloader_idx].append(indices)

    @override
    def on_predict_epoch_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        if self.write_interval in ("epoch", "batch_and_epoch"):
            predictions = self._predictions[0] if len(self._predictions) == 1 else self._predictions
            self.write_on_epoch_end(trainer, module, predictions, self._batch_indices)
        self._predictions, self._batch_indices = [], []
