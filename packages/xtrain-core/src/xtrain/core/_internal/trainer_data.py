"""Where a stage's dataloaders come from and how they are prepared for the run (sharded, limited, resumable).

A mixin of :class:`~xtrain.core.Trainer`: the lookup order (dataloaders passed, then the DataModule's, then the
module's) and the checks on what it finds are one concern, apart from the run they feed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from xtrain.core._internal.data import (
    batch_limit,
    check_loader,
    check_train_batches,
    combined_train,
    eval_loaders,
    prepare_dataloader,
    warn_empty_eval,
)
from xtrain.core._internal.run_flags import unshuffled
from xtrain.core._internal.shard_padding import warn_repeated_samples
from xtrain.core._internal.stage_steps import validation_loaders
from xtrain.core._internal.trainer_compat import shaped_as
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core._internal.trainer_args import RunFlags
    from xtrain.core._internal.trainer_run import Stage
    from xtrain.core.datamodule import DataModule
    from xtrain.core.module import TrainModule
    from xtrain.core.strategy import Strategy

__all__ = ["StageLoaders"]


class StageLoaders:
    """Finds and prepares the dataloaders of the stage being run (mixed in); the loops read what it sets."""

    strategy: Strategy
    datamodule: DataModule | None
    use_distributed_sampler: bool
    limit_train_batches: int | float
    num_training_batches: float
    val_check_interval: int | float
    check_val_every_n_epoch: int | None
    limit_val_batches: int | float
    limit_test_batches: int | float
    limit_predict_batches: int | float
    _flags: RunFlags
    _loaders: dict[str, Any]
    _train_loader: Any
    _shown_loaders: dict[str, Any]
    _eval_loaders: list[Any]
    _val_limits: list[float]
    # The stage whose loaders this run set up already (configure_optimizers reading estimated_stepping_batches):
    # the run does not ask the dataloader hooks a second time, as Lightning's does not.
    _loaders_ready: Stage | None = None

    if TYPE_CHECKING:  # defined on the Trainer
        @property
        def module(self) -> TrainModule: ...

    def _loader(self, key: str, method: str) -> Any:
        found = self._loaders.get(key)
        if found is None and self.datamodule is not None:
            found = getattr(self.datamodule, method)()
        if found is None and getattr(self.module, method, None) is not None:  # the class's, or set on the instance
            found = getattr(self.module, method)()
        return found

    def _setup_dataloaders(self, stage: Stage) -> None:
        dist = self.strategy.distributed_sampler_kwargs

        def prep(loader: Any, train: bool) -> Any:
            check_loader(loader, "train_dataloaders" if train else "val_dataloaders" if stage in ("fit", "validate")
                         else "dataloaders")
            return prepare_dataloader(loader, distributed=dist, use_distributed_sampler=self.use_distributed_sampler,
                                      training=train, pad=stage != "predict")

        def as_list(value: Any) -> list[Any]:
            if isinstance(value, Mapping):
                return list(value.values())
            return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]
        sharded = dist is not None and self.use_distributed_sampler
        if stage == "fit":
            train = self._loader("train", "train_dataloader")
            if train is None:
                raise ConfigError("train_dataloaders", None, "fit needs training data.",
                                  fix="pass train_dataloaders=..., or a datamodule with train_dataloader().")
            overfit = bool(self._flags.overfit_batches)
            changed = sharded or overfit
            # overfit_batches set both limits: a message must name it, not a limit the user never wrote.
            limit_name = "overfit_batches" if overfit else "limit_train_batches"
            combined = combined_train(train, lambda dl: prep(unshuffled(dl) if overfit else dl, True),
                                      self.limit_train_batches, argument=limit_name)
            if combined is not None:  # several loaders, combined as Lightning's CombinedLoader
                self._train_loader, self.num_training_batches = combined, combined.length
                self._shown_loaders["train"] = combined.shape(combined.loaders) if changed else \
                    getattr(train, "iterables", train)
            else:
                self._train_loader = prep(unshuffled(train) if overfit else train, True)
                check_train_batches(self._train_loader)
                self.num_training_batches = batch_limit(self._train_loader, self.limit_train_batches, limit_name)
                self._shown_loaders["train"] = self._train_loader if changed else train
            if isinstance(self.val_check_interval, int) and self.check_val_every_n_epoch is not None and \
                    self.val_check_interval > self.num_training_batches:
                raise ConfigError("val_check_interval", self.val_check_interval, f"is more batches than an epoch has "
                                  f"({self.num_training_batches}).", fix="lower it, or set check_val_every_n_epoch="
                                  "None to count batches across epochs.")
            if isinstance(self.val_check_interval, float) and self.val_check_interval != 1.0 and \
                    self.num_training_batches == math.inf:
                raise ConfigError("val_check_interval", self.val_check_interval, "is a fraction of an epoch, but the "
                                  "training dataloader has no length (an IterableDataset without __len__), so the "
                                  "epoch has no fraction (Lightning refuses it too).",
                                  fix="pass a number of batches (val_check_interval=1000), or 1.0 to validate at each "
                                      "epoch's end.")
        kind = {"fit": ("val", "val_dataloader", self.limit_val_batches),
                "validate": ("val", "val_dataloader", self.limit_val_batches),
                "test": ("test", "test_dataloader", self.limit_test_batches),
                "predict": ("predict", "predict_dataloader", self.limit_predict_batches)}[stage]
        given = self._loader(kind[0], kind[1])
        loaders = eval_loaders(given, lambda dl: prep(dl, False), stage=stage,
                               argument="val_dataloaders" if kind[0] == "val" else "dataloaders")
        if stage == "fit":
            loaders = validation_loaders(self.module, loaders)
        if stage != "fit" and not loaders:
            raise ConfigError("dataloaders", None, f"{stage} needs data.",
                              fix=f"pass dataloaders=..., or a datamodule with {kind[1]}().")
        self._eval_loaders = loaders
        self._shown_loaders[kind[0]] = shaped_as(given, loaders if sharded else as_list(given))
        limit_name = "overfit_batches" if kind[0] == "val" and self._flags.overfit_batches else \
            f"limit_{kind[0]}_batches"
        self._val_limits = [batch_limit(dl, kind[2], limit_name) for dl in loaders]
        warn_empty_eval(loaders, self._val_limits, "validation" if kind[0] == "val" else kind[0])
        if sharded and stage in ("validate", "test"):
            warn_repeated_samples(loaders, stage, world_size=self.strategy.world_size)
        self._loaders_ready = stage
