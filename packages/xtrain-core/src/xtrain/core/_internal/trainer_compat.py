"""Trainer attributes that Lightning code reads and xtrain's own code does not need.

Kept apart from the Trainer's logic: each is a read-only view of state the Trainer already holds. Found by running
real Lightning projects (lightning-hydra-template reads ``trainer.model`` in ``configure_optimizers``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

if TYPE_CHECKING:
    from xtrain.core._internal.metrics import MetricStore
    from xtrain.core._internal.trainer_args import RunFlags
    from xtrain.core.callbacks.callback import Callback
    from xtrain.core.callbacks.early_stopping import EarlyStopping
    from xtrain.core.callbacks.progress import ProgressBar
    from xtrain.core.strategy import Strategy

__all__ = ["LightningAttributes", "shaped_as"]


def shaped_as(given: Any, loaders: list[Any]) -> Any:
    """``loaders`` (one per loader in ``given``) in the shape ``given`` had: ``None``, one loader, a list or a tuple.

    Lightning's ``trainer.val_dataloaders`` and its siblings return what the user passed, not the loops' flat list,
    so scripts can use ``trainer.val_dataloaders.dataset`` after passing one loader.
    """
    if given is None:
        return None
    if isinstance(given, Mapping):
        return dict(zip(given, loaders, strict=False))
    if not isinstance(given, (list, tuple)) and len(loaders) != 1:
        return given  # a CombinedLoader
    if isinstance(given, tuple):
        return tuple(loaders)
    return list(loaders) if isinstance(given, list) else loaders[0]


class LightningAttributes:
    """Read-only Lightning names on :class:`~xtrain.core.Trainer` (mixed in)."""

    _ckpt_path: str | Path | None
    _val_limits: list[float]
    _shown_loaders: dict[str, Any]
    callbacks: list[Callback]
    strategy: Strategy
    _metrics: MetricStore
    _flags: RunFlags

    def _stage(self) -> str | None:
        return getattr(self, "state", None)

    if not TYPE_CHECKING:  # for type checkers a __getattr__ would make every misspelt attribute Any

        def __getattr__(self, name: str) -> Any:
            """Only called for a name the Trainer lacks: Lightning's (``trainer.lightning_module``) get a hint naming
            xtrain's, so a script ported by hand learns the new name instead of reading a bare AttributeError."""
            found = getattr(type(self), name, None)
            if isinstance(found, property) and found.fget is not None:
                return found.fget(self)  # a property that raised AttributeError inside: let that error show
            message = f"{type(self).__name__!r} object has no attribute {name!r}"
            if not name.startswith("_"):
                from xtrain.core._internal.migrate.hints import attribute_hint  # the rule table, read on a miss

                hint = attribute_hint(name)
                message += f"; {hint}" if hint else ""
            raise AttributeError(message, name=name, obj=self)

    @property
    def model(self) -> nn.Module | None:
        """The module as the strategy wraps it (``DistributedDataParallel`` under ``ddp``); the module itself before
        the run sets the strategy up."""
        try:
            return self.strategy.model
        except RuntimeError:
            return getattr(self, "_module", None)

    @property
    def precision(self) -> str:
        """The precision's name, e.g. ``"32-true"`` or ``"bf16-mixed"``."""
        return self.strategy.precision.name

    @property
    def ckpt_path(self) -> str | Path | None:
        """The checkpoint the last ``fit``/``validate``/``test``/``predict`` started from (``"auto"`` resolved)."""
        return self._ckpt_path

    @property
    def early_stopping_callbacks(self) -> list[EarlyStopping]:
        from xtrain.core.callbacks.early_stopping import EarlyStopping

        return [cb for cb in self.callbacks if isinstance(cb, EarlyStopping)]

    @property
    def early_stopping_callback(self) -> EarlyStopping | None:
        return next(iter(self.early_stopping_callbacks), None)

    @property
    def train_dataloader(self) -> Any:
        """The training dataloader as passed (``None`` before ``fit`` loads it).

        The same object the user gave unless the run had to rebuild it (sharded over ranks, ``overfit_batches``);
        the fit loop iterates its own copy, whose sampler can resume mid-epoch.
        """
        return self._shown_loaders.get("train")

    @property
    def val_dataloaders(self) -> Any:
        """The validation dataloader(s) of ``fit``/``validate`` in the shape passed: one loader, a list or a tuple.

        ``None`` before a stage loaded them, as in Lightning; the loops keep their own flat list.
        """
        return self._shown_loaders.get("val")

    @property
    def test_dataloaders(self) -> Any:
        """The test dataloader(s) of ``test`` in the shape passed (``None`` before ``test`` loaded them)."""
        return self._shown_loaders.get("test")

    @property
    def predict_dataloaders(self) -> Any:
        """The predict dataloader(s) of ``predict`` in the shape passed (``None`` before ``predict`` loaded them)."""
        return self._shown_loaders.get("predict")

    @property
    def num_val_batches(self) -> list[float]:
        """Batches per validation dataloader (``inf`` for one without length), once ``fit``/``validate`` set them;
        ``[]`` with ``limit_val_batches=0`` (validation is off), as in Lightning."""
        on = self._stage() in ("fit", "validate") and getattr(self, "limit_val_batches", 1.0) != 0
        return list(self._val_limits) if on else []

    @property
    def val_check_batch(self) -> float:
        """Training batches between validations, as Lightning's: ``val_check_interval`` as an int, or that fraction
        of the epoch's batches (at least 1); ``inf`` for an epoch without a length or validation by time."""
        import math

        interval = getattr(self, "val_check_interval", 1.0)
        batches: float = getattr(self, "num_training_batches", math.inf)
        if isinstance(interval, int) and not isinstance(interval, bool):
            return interval
        if isinstance(interval, float) and math.isfinite(batches):
            return max(1, int(batches * interval))
        return math.inf

    @property
    def num_sanity_val_batches(self) -> list[float]:
        """Batches per validation dataloader that the sanity check runs (``num_sanity_val_steps`` at most each)."""
        steps: int = getattr(self, "num_sanity_val_steps", 0)
        return [lim if steps == -1 else min(lim, steps) for lim in self.num_val_batches]

    @property
    def num_test_batches(self) -> list[float]:
        on = self._stage() == "test" and getattr(self, "limit_test_batches", 1.0) != 0
        return list(self._val_limits) if on else []

    @property
    def num_predict_batches(self) -> list[float]:
        return list(self._val_limits) if self._stage() == "predict" else []

    _running: bool = False  # between the start of fit/validate/test/predict and its return (trainer_run)

    @property
    def training(self) -> bool:
        """Whether the fit loop is training now (not validating, not in the sanity check); ``False`` once ``fit``
        returned, as Lightning's stage flags."""
        return (self._running and self._stage() == "fit" and self._metrics.stage == "train"
                and not getattr(self, "sanity_checking", False))

    @property
    def validating(self) -> bool:
        """Inside ``validate`` (its ``setup`` too), or in the validation of ``fit`` (not its sanity check)."""
        stage = self._stage()
        return self._running and (stage == "validate" or (stage == "fit" and self._metrics.stage == "validate"))

    @property
    def testing(self) -> bool:
        return self._running and self._stage() == "test"

    @property
    def predicting(self) -> bool:
        return self._running and self._stage() == "predict"

    @property
    def evaluating(self) -> bool:
        """Validating, testing or in the sanity check now (Lightning's)."""
        return self.validating or self.testing or (self._running and bool(getattr(self, "sanity_checking", False)))

    # -- hardware, as Lightning's Trainer names it ------------------------------------------------------------------
    @property
    def scaler(self) -> Any:
        """The precision plugin's gradient scaler (``16-mixed``), else ``None``."""
        return getattr(self.strategy.precision, "scaler", None)

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """``num_replicas`` and ``rank`` the strategy shards data with; ``None`` when every process sees all data."""
        return self.strategy.distributed_sampler_kwargs

    @property
    def num_nodes(self) -> int:
        return int(getattr(self.strategy, "num_nodes", 1))

    @property
    def node_rank(self) -> int:
        return self.strategy.node_rank

    @property
    def device_ids(self) -> list[int]:
        """The indices of this node's devices (``[0]`` for the CPU), as Lightning's."""
        devices = list(getattr(self.strategy, "parallel_devices", None) or [self.strategy.root_device])
        return [d.index if d.index is not None else i for i, d in enumerate(devices)]

    @property
    def num_devices(self) -> int:
        return len(self.device_ids)

    # -- switches as given ---------------------------------------------------------------------------------------
    @property
    def min_epochs(self) -> int:
        return self._flags.min_epochs

    @property
    def min_steps(self) -> int | None:
        """``None`` when not set, as Lightning's."""
        return self._flags.min_steps or None

    @property
    def overfit_batches(self) -> int | float:
        return self._flags.overfit_batches

    @property
    def reload_dataloaders_every_n_epochs(self) -> int:
        return self._flags.reload_dataloaders_every_n_epochs

    @property
    def barebones(self) -> bool:
        return self._flags.barebones

    @property
    def precision_plugin(self) -> Any:
        """Lightning's name of ``trainer.strategy.precision``."""
        return self.strategy.precision

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank 0 only, as Lightning's ``trainer.print``."""
        if self.strategy.global_rank == 0:
            print(*args, **kwargs)

    @property
    def progress_bar_callback(self) -> ProgressBar | None:
        """The progress bar among the callbacks (``None`` with ``enable_progress_bar=False``)."""
        from xtrain.core.callbacks.progress import ProgressBar

        return next((cb for cb in self.callbacks if isinstance(cb, ProgressBar)), None)

    @property
    def enable_validation(self) -> bool:
        """Whether ``fit`` validates: validation data, a ``validation_step``, and ``limit_val_batches`` above 0."""
        from xtrain.core._internal.hooks import overrides
        from xtrain.core.datamodule import DataModule
        from xtrain.core.module import TrainModule

        module = getattr(self, "_module", None)
        if module is None or getattr(self, "limit_val_batches", 1.0) == 0:
            return False
        if not overrides(module, TrainModule, "validation_step"):
            return False
        datamodule = getattr(self, "datamodule", None)
        return (self._shown_loaders.get("val") is not None or overrides(module, TrainModule, "val_dataloader")
                or (datamodule is not None and overrides(datamodule, DataModule, "val_dataloader")))
