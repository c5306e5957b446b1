"""DataModule: where the data comes from, kept apart from the model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from xtrain.core._internal.class_only import class_only
from xtrain.core._internal.hparams import HyperparametersMixin

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

__all__ = ["DataModule"]


class DataModule(HyperparametersMixin):
    """Groups downloading, splitting and the dataloaders of each stage.

    ``prepare_data`` runs once per node (on local rank 0) for downloads; ``setup`` runs in every process.

    Attributes:
        trainer: The Trainer this data module was last passed to (``None`` before).
        prepare_data_per_node: ``True`` (as Lightning): :meth:`prepare_data` runs on local rank 0 of every node
            (node-local disks); ``False``: on global rank 0 only (storage all nodes share, so it downloads once).
    """

    trainer: Trainer | None = None
    prepare_data_per_node: bool = True

    def prepare_data(self) -> None:
        """Download or write data to disk (runs on one process per node, or in all with ``prepare_data_per_node =
        False``; set no state here)."""

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

    def load_state_dict(self, state: dict[str, Any], /) -> None:
        """Restore :meth:`state_dict`."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add entries to a checkpoint the Trainer is about to write."""

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Read entries back from a checkpoint the Trainer (or :meth:`load_from_checkpoint`) restores."""

    @classmethod
    def from_datasets(cls, train_dataset: Any = None, val_dataset: Any = None, test_dataset: Any = None,
                      predict_dataset: Any = None, batch_size: int = 1, num_workers: int = 0,
                      **datamodule_kwargs: Any) -> Self:
        """A data module whose dataloaders load the given datasets (each a dataset, or a list or dict of them),
        as Lightning's: the training data shuffled (unless iterable), ``batch_size`` and ``num_workers`` for every
        loader; ``datamodule_kwargs`` go to the constructor. A stage without a dataset keeps the class's hook."""
        from functools import partial

        from xtrain.core._internal.from_datasets import datasets_loader

        datamodule = cls(**datamodule_kwargs)
        given = {"train_dataloader": train_dataset, "val_dataloader": val_dataset, "test_dataloader": test_dataset,
                 "predict_dataloader": predict_dataset}
        for method, dataset in given.items():
            if dataset is not None:
                setattr(datamodule, method, partial(datasets_loader, dataset, batch_size=batch_size,
                                                    num_workers=num_workers, shuffle=method == "train_dataloader"))
        return datamodule

    @class_only
    def load_from_checkpoint(cls, checkpoint_path: str | Path, map_location: Any = None,
                             hparams_file: str | Path | None = None, weights_only: bool | None = None,
                             **kwargs: Any) -> Self:
        """Build the data module from the hyperparameters saved in ``checkpoint_path`` (read with
        ``weights_only=True``; Lightning's ``weights_only=False`` is accepted and not honoured) and restore its
        :meth:`state_dict`. A ``hparams_file`` (``hparams.yaml``) replaces the saved hyperparameters, as in
        Lightning; ``kwargs`` replace either. Called on an instance, it raises ``TypeError`` (as Lightning)."""
        from xtrain.core._internal.load_from_checkpoint import load_datamodule, warn_weights_only

        warn_weights_only(weights_only, f"{cls.__name__}.load_from_checkpoint")

        return load_datamodule(cls, checkpoint_path, map_location=map_location, overrides=kwargs,
                               hparams_file=hparams_file)
