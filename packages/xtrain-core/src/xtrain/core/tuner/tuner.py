"""The Tuner: the learning-rate finder and the batch-size finder, run on a Trainer's hardware settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from xtrain.core._internal.tuning import METHODS, Method, dataset_length, isolated_rng, preserved, run_trial
from xtrain.core.datamodule import DataModule
from xtrain.core.errors import ConfigError
from xtrain.core.rank_zero import rank_zero_info
from xtrain.core.tuner.batch_size import find_batch_size
from xtrain.core.tuner.lr_finder import LRFinder, RangeTest

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["Tuner"]

_LR_ATTRS = ("lr", "learning_rate")


class Tuner:
    """Tunes a module's learning rate and batch size before the real run.

    Each search trains in short separate runs on one device of ``trainer``'s accelerator, in its precision and with
    its accumulation and clipping settings, writing nothing (no logs, checkpoints, progress bars; the trainer's own
    callbacks are not called). Afterwards every parameter and buffer of the module is exactly as before (values,
    dtypes, devices, ``requires_grad``; the same objects, so optimizers built on them stay valid), the trainer is
    untouched, and the global random generators (torch, CUDA, python, numpy) are where they were, so a seeded
    script trains the same whether it tuned or not. Only the tuned attribute changes.

    Both methods take Lightning 2.6's parameters in Lightning's order, positionally too: a deliberate exception to
    the project's keyword-only rule, so that Lightning scripts run unchanged.

    Args:
        trainer: The Trainer whose accelerator, precision, ``accumulate_grad_batches`` and gradient clipping the
            searches use (and, for the learning-rate finder, ``max_epochs`` and ``limit_train_batches``).
    """

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def lr_find(self, model: TrainModule, train_dataloaders: Any = None, val_dataloaders: Any = None,
                dataloaders: Any = None, datamodule: DataModule | None = None, method: Literal["fit"] = "fit",
                min_lr: float = 1e-8, max_lr: float = 1.0, num_training: int = 100,
                mode: Literal["exponential", "linear"] = "exponential", early_stop_threshold: float | None = 4.0,
                update_attr: bool = True, attr_name: str = "") -> LRFinder:
        """Run the learning-rate range test: up to ``num_training`` optimizer steps from ``min_lr`` to ``max_lr``.

        The test trains within the Trainer's limits, as Lightning's does: when ``max_epochs`` epochs (of
        ``limit_train_batches`` batches) end before ``num_training`` steps, the test ends there. Too short a test
        gives no suggestion (``suggestion()`` is ``None``) and changes nothing. Validation does not run during the
        test (Lightning runs it at each epoch end; it does not change the curve).

        Args:
            model: The module (its ``configure_optimizers`` optimizer is used; its learning rate is overridden).
            train_dataloaders: Training data, or a DataModule (else the module's/datamodule's ``train_dataloader``).
            val_dataloaders: Accepted as Lightning accepts them; not used (no validation during the test).
            dataloaders: Lightning's argument for other methods; must be ``None``, as there.
            datamodule: A DataModule providing the data.
            method: ``"fit"``, the only method Lightning's finder runs.
            min_lr: The first learning rate.
            max_lr: The last learning rate.
            num_training: The number of steps.
            mode: ``"exponential"`` (even steps in log lr) or ``"linear"``.
            early_stop_threshold: Stop when the smoothed loss exceeds this multiple of the best one (``None``: never).
            update_attr: Set the suggested rate on the module (``attr_name``, else ``lr`` or ``learning_rate``, as an
                attribute or in ``hparams``); checked before the test starts.
            attr_name: The attribute to set.
        """
        if method != "fit":
            raise ConfigError("method", method, "is not a method the learning-rate finder runs.", choices=["fit"],
                              fix="write method='fit' (or leave it out).")
        _check_loaders(method, train_dataloaders, val_dataloaders, dataloaders)
        if not 0 < min_lr < max_lr:
            raise ConfigError("min_lr", min_lr, f"must be positive and below max_lr={max_lr!r}.",
                              fix="write min_lr=1e-8, max_lr=1.0.")
        if mode not in ("exponential", "linear"):
            raise ConfigError("mode", mode, "is not a range-test mode.", choices=["exponential", "linear"],
                              fix="write mode='exponential'.")
        if not isinstance(num_training, int) or num_training < 2:
            raise ConfigError("num_training", num_training, "must be an int >= 2.", fix="write num_training=100.")
        target = _lr_attr(model, attr_name) if update_attr else ""
        result = LRFinder(min_lr=min_lr, max_lr=max_lr, num_training=num_training, mode=mode)
        test = RangeTest(result, early_stop_threshold=early_stop_threshold)
        trainer = self.trainer
        with isolated_rng(trainer), preserved(model):
            run_trial(trainer, model, [test], method="fit", steps=num_training, max_epochs=trainer.max_epochs,
                      limit_train_batches=trainer.limit_train_batches, train_dataloaders=train_dataloaders,
                      datamodule=datamodule)
        steps = len(result.lrs)
        if result.stopped_early:
            rank_zero_info(f"lr_find: the loss diverged at step {steps} of num_training={num_training}; the test "
                           "stopped there.")
        elif steps < num_training:
            rank_zero_info(f"lr_find: the Trainer's limits (max_epochs={trainer.max_epochs}, "
                           f"limit_train_batches={trainer.limit_train_batches}) ended the test after {steps} of "
                           f"num_training={num_training} steps.")
        if update_attr:
            suggestion = result.suggestion(10, 1, stacklevel=3)
            if suggestion is not None:
                _set_attr(model, target, suggestion)
                rank_zero_info(f"lr_find: set {type(model).__name__}.{target} to {suggestion}.")
        return result

    def scale_batch_size(self, model: TrainModule, train_dataloaders: Any = None, val_dataloaders: Any = None,
                         dataloaders: Any = None, datamodule: DataModule | None = None, method: Method = "fit",
                         mode: Literal["power", "binsearch"] = "power", steps_per_trial: int = 3, init_val: int = 2,
                         max_trials: int = 25, batch_arg_name: str = "batch_size", margin: float = 0.05,
                         max_val: int = 8192) -> int:
        """Find the largest batch size whose steps fit in memory; sets it and returns it.

        The size lives in ``batch_arg_name`` on the datamodule (when given and it has one) or on the module, whose
        dataloader hook for ``method`` (``train_dataloader()`` for ``"fit"``) must build its loader from it; a
        loader passed in directly cannot change size, so it is refused, as in Lightning. Each trial runs
        ``steps_per_trial`` steps (batches, for the other methods); a trial that raises an out-of-memory error
        (``torch.OutOfMemoryError`` or a backend's "out of memory") ends the growth. When the first size already
        fails, smaller ones are tried (halving in ``power`` mode, bisecting towards 1 in ``binsearch``), as Lightning
        does; only a batch of 1 that fails is an error. The search and its results are Lightning 2.6's (see
        ``find_batch_size``), each step reported on the console.

        Args:
            model: The module.
            train_dataloaders: A DataModule (Lightning's positional form), else must be ``None``.
            val_dataloaders: Accepted for ``method="fit"``, as Lightning accepts them; not used (no validation).
            dataloaders: For the other methods: must be ``None`` too (the loader must come from a hook).
            datamodule: A DataModule whose dataloader hook reads the batch size.
            method: The stage the trials run: ``"fit"``, ``"validate"``, ``"test"`` or ``"predict"``.
            mode: ``"power"`` (double until it fails) or ``"binsearch"`` (then bisect up to the failing size).
            steps_per_trial: Steps (batches) per trial.
            init_val: The first size tried.
            max_trials: The most trials (``binsearch``: the most trials that fit), as in Lightning.
            batch_arg_name: The attribute holding the batch size.
            margin: ``binsearch`` only: the fraction taken off the size found, a safety buffer (Lightning's 5%).
            max_val: The largest size tried.
        """
        if method not in METHODS:
            raise ConfigError("method", method, "is not a method the batch-size finder runs.", choices=list(METHODS),
                              fix="write method='fit'.")
        _check_loaders(method, train_dataloaders, val_dataloaders, dataloaders)
        if isinstance(train_dataloaders, DataModule) and datamodule is None:
            datamodule, train_dataloaders = train_dataloaders, None
        loader = train_dataloaders if method == "fit" else dataloaders
        if loader is not None:
            argument = "train_dataloaders" if method == "fit" else "dataloaders"
            raise ConfigError(argument, type(loader).__name__, "is a loader passed in directly, whose batch size the "
                              "search cannot change.", fix=f"build the loader in {_hook(method)}() from "
                              f"self.{batch_arg_name} (on the module or a DataModule) and pass no loader.")
        if mode not in ("power", "binsearch"):
            raise ConfigError("mode", mode, "is not a batch-size search mode.", choices=["power", "binsearch"],
                              fix="write mode='power'.")
        for name, value in (("steps_per_trial", steps_per_trial), ("init_val", init_val), ("max_trials", max_trials),
                            ("max_val", max_val)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(name, value, "must be a positive int.", fix=f"write {name}=3.")
        if not isinstance(margin, (int, float)) or not 0 <= margin < 1:
            raise ConfigError("margin", margin, "must be a fraction in [0, 1).", fix="write margin=0.05 (5%).")
        # As Lightning: the data module's attribute or hparams key first, then the module's.
        holder: Any = datamodule if datamodule is not None and _has(datamodule, batch_arg_name) else model
        if not _has(holder, batch_arg_name):
            raise ConfigError("batch_arg_name", batch_arg_name, f"is neither an attribute nor an hparams key of "
                              f"{type(model).__name__}"
                              f"{' or ' + type(datamodule).__name__ if datamodule is not None else ''}.",
                              fix=f"store the batch size in self.{batch_arg_name} (or save_hyperparameters() it) "
                                  f"and build {_hook(method)}() from it.")
        original = _get_attr(holder, batch_arg_name)
        trainer = self.trainer

        def trial(size: int) -> int | None:
            _set_attr(holder, batch_arg_name, size)
            run = run_trial(trainer, model, [], method=method, steps=steps_per_trial, max_epochs=trainer.max_epochs,
                            limit_train_batches=1.0, datamodule=datamodule)
            return dataset_length(run, method)

        with isolated_rng(trainer), preserved(model):
            try:
                found, _ = find_batch_size(trial, mode=mode, init_val=init_val, max_trials=max_trials,
                                           max_val=max_val, margin=margin)
            finally:
                _set_attr(holder, batch_arg_name, original)
        _set_attr(holder, batch_arg_name, found)
        return found


def _hook(method: Method) -> str:
    return "train_dataloader" if method == "fit" else f"{'val' if method == 'validate' else method}_dataloader"


def _check_loaders(method: str, train_dataloaders: Any, val_dataloaders: Any, dataloaders: Any) -> None:
    """Lightning's rule: ``fit`` reads ``train_dataloaders``/``val_dataloaders``, the other methods ``dataloaders``."""
    if method == "fit" and dataloaders is not None:
        raise ConfigError("dataloaders", type(dataloaders).__name__, "is for method='validate', 'test' or 'predict'.",
                          fix="pass train_dataloaders=/val_dataloaders= with method='fit'.")
    if method != "fit" and (train_dataloaders is not None or val_dataloaders is not None):
        name = "train_dataloaders" if train_dataloaders is not None else "val_dataloaders"
        raise ConfigError(name, type(train_dataloaders if train_dataloaders is not None else val_dataloaders).__name__,
                          f"is for method='fit', not method={method!r}.", fix="pass dataloaders= instead.")


def _has(obj: Any, name: str) -> bool:
    hparams = getattr(obj, "hparams", None)
    return hasattr(obj, name) or (hparams is not None and name in hparams)


def _lr_attr(model: TrainModule, attr_name: str) -> str:
    """The attribute ``update_attr`` will write, checked before the test runs (as Lightning does), so a module
    without one fails at once rather than after a test whose result it cannot keep."""
    if attr_name:
        if _has(model, attr_name):
            return attr_name
        raise ConfigError("attr_name", attr_name, f"is neither an attribute of {type(model).__name__} nor a key of "
                          "its hparams.", fix="name the attribute your configure_optimizers reads the learning rate "
                          "from, or pass update_attr=False.")
    for name in _LR_ATTRS:
        if _has(model, name):
            return name
    raise ConfigError("attr_name", attr_name, f"is empty and {type(model).__name__} has neither 'lr' nor "
                      "'learning_rate' (as an attribute or in hparams) to write the suggestion to.",
                      fix="pass attr_name='<the attribute configure_optimizers reads the rate from>', store the rate "
                          "in self.lr, or pass update_attr=False.")


def _get_attr(obj: Any, name: str) -> Any:
    """``name`` as an attribute, else from ``hparams`` (where :func:`_has` found it)."""
    return getattr(obj, name) if hasattr(obj, name) else obj.hparams[name]


def _set_attr(obj: Any, name: str, value: Any) -> None:
    """Write ``name`` as an attribute and in ``hparams``, wherever it is present (as Lightning writes both)."""
    hparams = getattr(obj, "hparams", None)
    if hasattr(obj, name):
        setattr(obj, name, value)
    if hparams is not None and name in hparams:
        hparams[name] = value
