"""``trainer.fit_loop``: the parts of Lightning's fit loop object that real scripts read, over the Trainer's state.

Scripts reach into it for three things: loading the training data early (``setup_data()`` in
``configure_optimizers``, to size a OneCycleLR), the epoch limit (read, or raised to train longer) and the counts
of batches and epochs done. Nothing else of Lightning's loop internals is offered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from xtrain.core._internal.progress import FitProgress
    from xtrain.core.trainer import Trainer

__all__ = ["FitLoopView"]


@dataclass(frozen=True)
class EpochCounts:
    """Lightning's ``epoch_progress.current``: epochs ``ready``/``started``/``processed``/``completed``."""

    ready: int
    started: int
    processed: int
    completed: int


@dataclass(frozen=True)
class EpochProgress:
    current: EpochCounts
    total: EpochCounts


class FitLoopView:
    """A read-mostly view of the running fit; ``max_epochs`` and ``max_steps`` write to the Trainer."""

    def __getattr__(self, name: str) -> NoReturn:
        """Lightning's other loop internals (``epoch_loop``, ``batch_progress``...) are not offered: say what is."""
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"trainer.fit_loop.{name} is one of Lightning's loop internals, which xtrain does not offer; fit_loop has "
            "setup_data(), max_epochs, max_steps, total_batch_idx, batch_idx and epoch_progress. For the number of "
            "optimizer steps use trainer.estimated_stepping_batches, for the batches trainer.num_training_batches, "
            "for the step trainer.global_step.")

    def __init__(self, trainer: Trainer, progress: FitProgress, load_train_data: Callable[[], None]) -> None:
        self._trainer, self._progress, self._load_train_data = trainer, progress, load_train_data

    def setup_data(self) -> None:
        """Load the training dataloader now (``trainer.train_dataloader`` and ``num_training_batches`` are set)."""
        if self._trainer.state == "fit" and self._trainer.train_dataloader is None:
            self._load_train_data()

    @property
    def max_epochs(self) -> int | None:
        return self._trainer.max_epochs

    @max_epochs.setter
    def max_epochs(self, value: int) -> None:
        self._trainer.max_epochs = value

    @property
    def max_steps(self) -> int:
        return self._trainer.max_steps

    @max_steps.setter
    def max_steps(self, value: int) -> None:
        self._trainer.max_steps = value

    @property
    def total_batch_idx(self) -> int:
        """Training batches run in this fit so far, over all epochs."""
        return self._progress.total_batches

    @property
    def batch_idx(self) -> int:
        """Training batches run in the current epoch."""
        return self._progress.batches_in_epoch

    @property
    def epoch_progress(self) -> EpochProgress:
        done = self._progress.epoch
        running = done + (1 if self._progress.batches_in_epoch else 0)
        counts = EpochCounts(ready=running, started=running, processed=done, completed=done)
        return EpochProgress(current=counts, total=counts)
