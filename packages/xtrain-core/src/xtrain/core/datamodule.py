"""DataModule: where the data comes from, kept apart from the model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from xtrain.core._internal.hparams import HyperparametersMixin

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

__all__ = ["DataModule"]


class DataModule(HyperparametersMixin):
    """Groups downloading, splitting and the dataloaders of each stage.

    ``prepare_data`` runs once per node (on local rank 0) for downloads; ``setup`` runs in every process.

    Attributes:
        trainer: The Trainer this data module was last passed to (``None`` before).
    """

    trainer: Trainer | None = None

    def prepare_data(self) -> None:
        """Download or write data to disk (runs on one process per node; set no state here)."""

    def setup(self, stage: str) -> None:
        """Build datasets for ``stage`` (``"fit"``, ``"validate"``, ``"test"``, ``"predict"``); runs on every rank."""

    def teardown(self, stage: str) -> None:
        """Release what :meth:`setup` made."""

    def train_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no train_dataloader(); implement it to call fit().")

    def val_dataloader(self) -> Any:
        return None

    def test_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no test_dataloader(); implement it to call test().")

    def predict_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no predict_dataloader(); implement it to call predict().")

    def state_dict(self) -> dict[str, Any]:
        """State to store in checkpoints."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add entries to a checkpoint the Trainer is about to write."""

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Read entries back from a checkpoint the Trainer (or :meth:`load_from_checkpoint`) restores."""

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: str | Path, map_location: Any = None,
                             hparams_file: str | Path | None = None, **kwargs: Any) -> Self:
        """Build the data module from the hyperparameters saved in ``checkpoint_path`` (read with
        ``weights_only=True``) and restore its :meth:`state_dict`. A ``hparams_file`` (``hparams.yaml``) replaces
        the saved hyperparameters, as in Lightning; ``kwargs`` replace either."""
        from xtrain.core._internal.load_from_checkpoint import load_datamodule

        return load_datamodule(cls, checkpoint_path, map_location=map_location, overrides=kwargs,
                               hparams_file=hparams_file)
