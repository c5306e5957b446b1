"""The Tuner: the learning-rate finder and the batch-size finder, run on a Trainer's hardware settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from xtrain.core._internal.tuning import preserved, trial_fit
from xtrain.core.errors import ConfigError
from xtrain.core.tuner.batch_size import find_batch_size
from xtrain.core.tuner.lr_finder import LRFinder, RangeTest

if TYPE_CHECKING:
    from xtrain.core.datamodule import DataModule
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["Tuner"]

_LR_ATTRS = ("lr", "learning_rate")


class Tuner:
    """Tunes a module's learning rate and batch size before the real run.

    Each search trains in short separate runs on one device of ``trainer``'s accelerator, in its precision and with
    its accumulation and clipping settings, writing nothing (no logs, checkpoints, progress bars; the trainer's own
    callbacks are not called). Afterwards every parameter and buffer of the module is exactly as before (values,
    dtypes, devices, ``requires_grad``; the same objects, so optimizers built on them stay valid), and the trainer is
    untouched. Only the tuned attribute changes.

    Args:
        trainer: The Trainer whose accelerator, precision, ``accumulate_grad_batches`` and gradient clipping the
            searches use.
    """

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def lr_find(self, module: TrainModule, train_dataloaders: Any = None, *, datamodule: DataModule | None = None,
                min_lr: float = 1e-8, max_lr: float = 1.0, num_training: int = 100,
                mode: Literal["exponential", "linear"] = "exponential", early_stop_threshold: float | None = 4.0,
                update_attr: bool = True, attr_name: str = "") -> LRFinder:
        """Run the learning-rate range test: ``num_training`` optimizer steps from ``min_lr`` to ``max_lr``.

        Args:
            module: The module (its ``configure_optimizers`` optimizer is used; its learning rate is overridden).
            train_dataloaders: Training data (or the module's/datamodule's ``train_dataloader``).
            datamodule: A DataModule providing the data.
            min_lr: The first learning rate.
            max_lr: The last learning rate.
            num_training: The number of steps.
            mode: ``"exponential"`` (even steps in log lr) or ``"linear"``.
            early_stop_threshold: Stop when the smoothed loss exceeds this multiple of the best one (``None``: never).
            update_attr: Set the suggested rate on the module (``attr_name``, else ``lr`` or ``learning_rate``, as an
                attribute or in ``hparams``).
            attr_name: The attribute to set.
        """
        if not 0 < min_lr < max_lr:
            raise ConfigError("min_lr", min_lr, f"must be positive and below max_lr={max_lr!r}.",
                              fix="write min_lr=1e-8, max_lr=1.0.")
        if mode not in ("exponential", "linear"):
            raise ConfigError("mode", mode, "is not a range-test mode.", choices=["exponential", "linear"],
                              fix="write mode='exponential'.")
        if not isinstance(num_training, int) or num_training < 2:
            raise ConfigError("num_training", num_training, "must be an int >= 2.", fix="write num_training=100.")
        result = LRFinder(min_lr=min_lr, max_lr=max_lr, num_training=num_training, mode=mode)
        test = RangeTest(result, early_stop_threshold=early_stop_threshold)
        with preserved(module):
            trial_fit(self.trainer, module, [test], max_steps=num_training, train_dataloaders=train_dataloaders,
                      datamodule=datamodule)
        suggestion = result.suggestion()
        if update_attr and suggestion is not None:
            _set_attr(module, attr_name, _LR_ATTRS, suggestion, "attr_name")
        return result

    def scale_batch_size(self, module: TrainModule, *, datamodule: DataModule | None = None,
                         mode: Literal["power", "binsearch"] = "power", steps_per_trial: int = 3, init_val: int = 2,
                         max_trials: int = 25, batch_arg_name: str = "batch_size") -> int:
        """Find the largest batch size whose training steps fit in memory; sets it and returns it.

        The size lives in ``batch_arg_name`` on the datamodule (when given and it has one) or on the module, whose
        ``train_dataloader()`` must build its loader from it. Each trial trains ``steps_per_trial`` steps; a trial
        that raises an out-of-memory error (``torch.OutOfMemoryError`` or a backend's "out of memory") ends the
        growth. Sizes stop growing once one batch holds the whole training set.

        Args:
            module: The module.
            datamodule: A DataModule whose ``train_dataloader`` reads the batch size.
            mode: ``"power"`` (double until it fails) or ``"binsearch"`` (then bisect up to the failing size).
            steps_per_trial: Optimizer steps per trial.
            init_val: The first size tried.
            max_trials: The most trials.
            batch_arg_name: The attribute holding the batch size.
        """
        if mode not in ("power", "binsearch"):
            raise ConfigError("mode", mode, "is not a batch-size search mode.", choices=["power", "binsearch"],
                              fix="write mode='power'.")
        for name, value in (("steps_per_trial", steps_per_trial), ("init_val", init_val), ("max_trials", max_trials)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(name, value, "must be a positive int.", fix=f"write {name}=3.")
        holder: Any = datamodule if datamodule is not None and hasattr(datamodule, batch_arg_name) else module
        if not hasattr(holder, batch_arg_name):
            raise ConfigError("batch_arg_name", batch_arg_name, f"is not an attribute of {type(module).__name__}"
                              f"{' or ' + type(datamodule).__name__ if datamodule is not None else ''}.",
                              fix=f"store the batch size in self.{batch_arg_name} and build train_dataloader() from it.")
        original = getattr(holder, batch_arg_name)

        def trial(size: int) -> bool:
            setattr(holder, batch_arg_name, size)
            run = trial_fit(self.trainer, module, [], max_steps=steps_per_trial, datamodule=datamodule)
            return bool(run.num_training_batches > 1)

        with preserved(module):
            try:
                found, _ = find_batch_size(trial, mode=mode, init_val=init_val, max_trials=max_trials)
            finally:
                setattr(holder, batch_arg_name, original)
        if found == 0:
            raise ConfigError("init_val", init_val, "is already too large: the first trials ran out of memory.",
                              fix="start from init_val=1, or free memory (a smaller model, a lower precision).")
        _set_attr(holder, batch_arg_name, (), found, "batch_arg_name")
        return found


def _set_attr(obj: Any, name: str, candidates: tuple[str, ...], value: Any, argument: str) -> None:
    names = (name,) if name else candidates
    hparams = getattr(obj, "hparams", None)
    for candidate in names:
        if hasattr(obj, candidate):
            setattr(obj, candidate, value)
            if hparams is not None and candidate in hparams:
                hparams[candidate] = value
            return
        if hparams is not None and candidate in hparams:
            hparams[candidate] = value
            return
    raise ConfigError(argument, name or None, f"names no attribute of {type(obj).__name__} to set "
                      f"(looked for {list(names)}).", fix="pass attr_name='...' or update_attr=False.")
