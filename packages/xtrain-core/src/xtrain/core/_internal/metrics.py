"""What ``self.log`` records, and when it reaches the loggers and callbacks.

Values stay tensors (no ``.item()``, no cross-rank sync) until something reads them: the loggers every
``log_every_n_steps`` steps, the progress bar at its refresh rate, callbacks when they monitor a key. Only
``sync_dist=True`` adds a collective, and only where the user asked for it.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import torch

from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core._internal.metric_objects import MetricObjects
    from xtrain.core.module import MetricLike
    from xtrain.core.strategy import Strategy

__all__ = ["LOGGED_DTYPES", "REDUCTIONS", "MetricStore", "Stage"]

Stage = Literal["train", "validate", "test", "predict", "sanity_check"]
REDUCTIONS = ("mean", "sum", "max", "min")
_TORCH_REDUCE = (torch.mean, torch.sum, torch.max, torch.min)
_HALF = (torch.float16, torch.bfloat16)
_F32 = torch.float32
# The dtypes a checkpoint's logged values keep, by name (metric_resume checks that a file holds only these).
LOGGED_DTYPES = {dtype: str(dtype).removeprefix("torch.") for dtype in (torch.float16, torch.bfloat16, torch.float32,
                                                                         torch.float64, torch.int64, torch.bool)}
_TENSOR = torch.Tensor


class _Epoch:
    """One key's epoch accumulator (a plain class: a dataclass costs 0.35 ms of every ``import xtrain.core``)."""

    __slots__ = ("key", "logger", "prog_bar", "reduce_fx", "sync_dist", "total", "weight")

    def __init__(self, total: torch.Tensor, weight: float, reduce_fx: str, sync_dist: bool, prog_bar: bool,
                 logger: bool, key: str) -> None:
        self.total = total
        self.weight = weight
        self.reduce_fx = reduce_fx
        self.sync_dist = sync_dist
        self.prog_bar = prog_bar
        self.logger = logger
        self.key = key

    def update(self, value: torch.Tensor, weight: float) -> None:
        if self.reduce_fx == "mean":
            self.total = self.total + value * weight
            self.weight += weight
        elif self.reduce_fx == "sum":
            self.total = self.total + value
        elif self.reduce_fx == "max":
            self.total = torch.maximum(self.total, value)
        else:
            self.total = torch.minimum(self.total, value)



def _reduction(name: str, reduce_fx: Any) -> str:
    """``reduce_fx`` as one of :data:`REDUCTIONS`, spelled as Lightning accepts it too: any case, ``"avg"``, or the
    torch function (``torch.mean``)."""
    if any(reduce_fx is fn for fn in _TORCH_REDUCE):
        return str(reduce_fx.__name__)
    text = reduce_fx.lower() if isinstance(reduce_fx, str) else ""
    text = "mean" if text == "avg" else text
    if text in REDUCTIONS:
        return text
    raise ConfigError("reduce_fx", reduce_fx, f"is not a reduction for self.log({name!r}, ...).",
                      choices=REDUCTIONS, fix="pass one of them (or torch.mean, torch.sum, torch.max, torch.min); for "
                                           "another reduction, log a torchmetrics Metric.")

def _scalar(name: str, value: torch.Tensor) -> torch.Tensor:
    """The tensor fast path of ``self.log``: a 0-d, detached tensor, without copying it (a step logs many)."""
    if value.requires_grad:
        value = value.detach()
    if value.dim():
        if value.numel() != 1:
            raise ConfigError("value", tuple(value.shape), f"self.log({name!r}, ...) takes a scalar.",
                              fix="log a scalar, e.g. value.mean().")
        value = value.reshape(())
    if value.dtype in _HALF:
        value = value.float()
    return value


def _pair(value: torch.Tensor) -> list[Any]:
    """A scalar tensor as ``[number, dtype name]`` (exact: ``item()`` of a float32 or bfloat16 value is a double);
    other integer types as int64, other floating ones (float8...) as float64."""
    name = LOGGED_DTYPES.get(value.dtype)
    if name is not None:
        return [value.item(), name]
    if value.is_floating_point() or value.is_complex():
        return [float(value.real.item()) if value.is_complex() else float(value.item()), "float64"]
    return [int(value.item()), "int64"]


def _tensor(pair: list[Any]) -> torch.Tensor:
    return torch.tensor(pair[0], dtype=getattr(torch, pair[1]))


def _wide(dtype: torch.dtype) -> torch.dtype:
    """The dtype an epoch sum accumulates in: ``dtype``, or torch's default when that is wider (``64-true`` runs its
    steps under float64, so a float32 loss is averaged in float64 there, as Lightning's accumulators are)."""
    return torch.promote_types(dtype, torch.get_default_dtype())


def _batch_size(batch: Any) -> int:
    """The batch size an epoch mean weights a value with: the first dimension of the batch's first tensor, found as
    Lightning finds it (through lists, tuples, mappings and dataclasses, skipping strings and other leaves); 1 when
    the batch holds no tensor."""
    found = _first_size(batch)
    return 1 if found is None else found


def _first_size(batch: Any) -> int | None:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.ndim else 1
    if isinstance(batch, Mapping):
        items: Iterable[Any] = batch.values()
    elif isinstance(batch, (list, tuple)):
        items = batch
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        items = (getattr(batch, field.name) for field in dataclasses.fields(batch))
    else:
        return None
    for item in items:
        found = _first_size(item)
        if found is not None:
            return found
    return None


def _warn_unsynced(name: str) -> None:
    """As Lightning: an epoch value of a distributed run is each rank's own unless logged with ``sync_dist``."""
    from xtrain.core.rank_zero import rank_zero_warn

    rank_zero_warn(f"self.log({name!r}, ...) on epoch level in a distributed run without sync_dist=True: each rank "
                   f"keeps the mean of its own batches, so rank 0 logs and monitors its own part of the data, and a "
                   f"ModelCheckpoint ranking by it saves only when every rank's own value qualifies (after a resume, "
                   f"every rank compares with rank 0's saved ranking, so it may stop saving). Fix: "
                   f"self.log({name!r}, ..., sync_dist=True) to reduce it over the ranks (one all-reduce per epoch), "
                   f"or log a torchmetrics Metric, which syncs itself.", UserWarning)


class MetricStore:
    """Holds logged values per stage and hands them to loggers, the progress bar and callbacks."""

    def __init__(self) -> None:
        self.strategy: Strategy | None = None
        self.stage: Stage = "train"
        self.batch: Any = None
        self.step_values: dict[str, torch.Tensor] = {}
        self.step_logger_keys: set[str] = set()
        self.prog_bar_keys: set[str] = set()
        self._epochs: dict[str, dict[str, _Epoch]] = {}
        self._callback_metrics: dict[str, torch.Tensor] = {}
        # The fast path's values (see log), detached. Every reader of step_values/callback_metrics and the general
        # path call _settle first, which checks them and moves them there; nothing else needs to.
        self._raw: dict[str, torch.Tensor] = {}
        self._checked: set[str] = set()  # names whose first fast-path value was checked at the call
        self.logged_metrics: dict[str, float] = {}
        self._in_epoch_end = False
        self._per_step = True  # in training steps (not epoch-end hooks): where self.log is called every step
        self._pending: dict[str, torch.Tensor] = {}
        self.objects: MetricObjects | None = None  # torchmetrics Metric objects, once one is logged
        # "/dataloader_idx_<i>" while the steps of one of several evaluation dataloaders run (Lightning's keys)
        self.dataloader_suffix = ""
        # Values logged on_step in validation/test steps: sent to the loggers after their batch, on a step count of
        # evaluation batches per dataloader (Lightning's), never onto training rows nor into callback_metrics.
        self._eval_step_values: dict[str, torch.Tensor] = {}
        self._eval_batches: dict[tuple[Stage, int], int] = {}
        # Keys logged with add_dataloader_idx=False from steps of some of several dataloaders: their suffixes, so
        # validate()/test() put each in the dicts of those dataloaders only (as Lightning).
        self.key_dataloaders: dict[str, set[str]] = {}
        self._unsynced_told: set[str] = set()  # epoch values of a distributed run logged without sync_dist, warned

    def new_results(self) -> None:
        """Start a stage's metrics afresh, as Lightning does at each ``fit``/``validate``/``test``/``predict``: new
        dicts, so a reference the user took to the previous stage's (``trainer.callback_metrics`` after ``fit``)
        keeps its values through ``test``, and ``logged_metrics``/``progress_bar_metrics`` hold only this stage's."""
        self._settle()
        self._callback_metrics = {}
        self.logged_metrics = {}
        self.step_values = {}
        self.step_logger_keys = set()
        self.prog_bar_keys = set()
        self._eval_step_values = {}
        self._eval_batches = {}
        self.key_dataloaders = {}

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """``trainer.callback_metrics``: the latest value of every key, for callbacks that monitor one."""
        self._settle()
        return self._callback_metrics

    def _settle(self) -> None:
        """Bring the fast path's values into ``step_values`` and ``callback_metrics``. The call checked only the
        first value of each name; a later one that is not a float32 scalar is converted here, or refused naming the
        key, as the general path would have done at the call."""
        raw = self._raw
        if not raw:
            return
        for name, value in raw.items():
            if value.dtype is not _F32 or value.ndim:
                value = _scalar(name, value)
            self.step_values[name] = value
            self._callback_metrics[name] = value
        raw.clear()

    def _first_check(self, name: str, value: torch.Tensor) -> bool:
        """Whether ``name`` may take the fast path: its first value is a float32 scalar (checked once per name)."""
        if value.dtype is not _F32 or value.ndim:
            return False
        self._checked.add(name)
        return True

    @property
    def in_epoch_end(self) -> bool:
        return self._in_epoch_end

    @contextmanager
    def epoch_end_logging(self) -> Iterator[None]:
        """Inside epoch-end hooks, a logged value is final at once: no accumulation, no per-step entry."""
        self._in_epoch_end = True
        self._per_step = False
        try:
            yield
        finally:
            self._in_epoch_end = False
            self._per_step = self.stage == "train"

    def take_pending(self) -> dict[str, float]:
        """Values logged in epoch-end hooks, for the loggers; called after those hooks, so the Metric objects the
        epoch computed are reset here."""
        if self.objects is not None:
            self.objects.reset_computed()
        out = {k: float(v.item()) for k, v in self._pending.items()}
        self._pending.clear()
        self.logged_metrics.update(out)
        return out

    def log(self, name: str, value: torch.Tensor | float | int | MetricLike, prog_bar: bool, logger: bool,
            on_step: bool | None, on_epoch: bool | None, reduce_fx: Any, sync_dist: bool,
            batch_size: int | None, add_dataloader_idx: bool = True) -> None:
        """``self.log``'s work. Options may come positionally: ``TrainModule.log`` passes them so (matching nine
        keywords is a tenth of a call that a step may make dozens of times)."""
        # The common call, a tensor in training_step logged per step only, is kept detached (the step's graph is
        # not kept alive) in _raw: a name logged every step replaces its value there, and only the values that are
        # read (by the loggers every log_every_n_steps steps, the progress bar, a callback) are checked, in _settle:
        # a tensor's dtype and shape cost more to read than the rest of this call. The first value of each name is
        # checked here, so the common mistake (a non-scalar) is refused at its call. Everything else takes the
        # general path below.
        if (self._per_step and type(value) is _TENSOR and on_step is not False and not on_epoch and not sync_dist
                and reduce_fx == "mean" and (name in self._checked or self._first_check(name, value))):
            self._raw[name] = value.data if value.requires_grad else value
            if logger:
                self.step_logger_keys.add(name)
            if prog_bar:
                self.prog_bar_keys.add(name)
            return
        self._settle()  # the values reach step_values and callback_metrics in the order they were logged
        # In a step of one of several evaluation dataloaders, keys end in "/dataloader_idx_<i>" (after any
        # "_step"/"_epoch"), as Lightning's do.
        sfx = self.dataloader_suffix if add_dataloader_idx else ""
        if self.dataloader_suffix and not sfx:
            for key in (name, f"{name}_epoch", f"{name}_step"):
                self.key_dataloaders.setdefault(key, set()).add(self.dataloader_suffix)
        if not isinstance(value, (torch.Tensor, float, int)):
            if not isinstance(value, numbers.Real):  # a torchmetrics Metric: see metric_objects.py
                self._log_object(name, value, suffix=sfx, prog_bar=prog_bar, logger=logger, on_step=on_step,
                                 on_epoch=on_epoch)
                return
            value = float(value)  # a NumPy scalar (np.float32(...)), as Lightning takes any number
        if type(reduce_fx) is not str or reduce_fx not in REDUCTIONS:
            reduce_fx = _reduction(name, reduce_fx)
        training = self.stage == "train"
        step = training if on_step is None else on_step
        epoch = (not training) if on_epoch is None else on_epoch
        if not (step or epoch or self._in_epoch_end):
            raise ConfigError("on_step" if on_step is False else "on_epoch", False,
                              f"self.log({name!r}, ...) records neither this step's value nor the epoch's, so it "
                              f"would be dropped (Lightning refuses it too).",
                              fix="write on_epoch=True for the epoch's value, or on_step=True for each step's.")
        if isinstance(value, torch.Tensor):
            value = _scalar(name, value)
        else:
            value = torch.tensor(float(value), dtype=_wide(_F32))
        if self._in_epoch_end:
            if on_step or on_epoch is False:  # as Lightning: an epoch-end hook's value is the epoch's
                raise ConfigError("on_step" if on_step else "on_epoch", on_step if on_step else on_epoch,
                                  f"self.log({name!r}, ...) in an epoch-end hook (on_train_epoch_end, "
                                  "on_validation_epoch_end, ...) logs the epoch's value, not a step's.",
                                  fix="leave on_step and on_epoch out there (or log it from the step instead).")
            value = self._reduce(value, reduce_fx) if sync_dist else value
            self._callback_metrics[name] = value
            if logger:
                self._pending[name] = value
            if prog_bar:
                self.prog_bar_keys.add(name)
                self.step_values[name] = value
            return
        both = step and epoch
        if step:
            step_value = self._reduce(value, reduce_fx) if sync_dist else value
            key = (f"{name}_step" if both else name) + sfx
            if training:
                self.step_values[key] = step_value
                self._callback_metrics[key] = step_value
                if both:
                    self._callback_metrics[name + sfx] = step_value
                if logger:
                    self.step_logger_keys.add(key)
            elif logger:
                self._eval_step_values[key] = step_value
            if prog_bar:
                self.step_values[key] = step_value
                self.prog_bar_keys.add(key)
        if epoch:
            acc = self.epoch.get(name + sfx)
            weight = float(batch_size if batch_size is not None else
                           (_batch_size(self.batch) if reduce_fx == "mean" else 1))
            if acc is None:
                start = value.to(_wide(value.dtype)) if reduce_fx in ("mean", "sum") else value
                start = start * weight if reduce_fx == "mean" else start
                self.epoch[name + sfx] = _Epoch(start, weight if reduce_fx == "mean" else 0.0, reduce_fx, sync_dist,
                                                prog_bar, logger, (f"{name}_epoch" if both else name) + sfx)
            else:
                acc.update(value, weight)

    def _log_object(self, name: str, value: Any, *, suffix: str, **options: Any) -> None:
        from xtrain.core._internal.metric_objects import MetricObjects, is_metric

        if not is_metric(value):
            raise ConfigError("value", type(value).__name__, f"self.log({name!r}, ...) takes a scalar tensor, a number "
                              "or a torchmetrics Metric.", fix="log a scalar, e.g. float(value).")
        if self.objects is None:
            self.objects = MetricObjects()
        self.objects.log(self, name, value, suffix=suffix, **options)

    def _reduce(self, value: torch.Tensor, reduce_fx: str) -> torch.Tensor:
        if self.strategy is None or self.strategy.world_size == 1:
            return value
        return self.strategy.reduce_data_parallel(value.to(self.strategy.root_device),
                                                  op=reduce_fx)  # type: ignore[arg-type]

    def step_metrics_for_logger(self) -> dict[str, float]:
        """The latest step values that go to loggers, as floats (the only place they are synchronized)."""
        self._settle()
        out = {k: float(self.step_values[k].item()) for k in self.step_logger_keys if k in self.step_values}
        self.logged_metrics.update(out)
        return out

    def eval_batch_done(self, dataloader_idx: int) -> tuple[dict[str, float], int]:
        """After a validation/test batch: the values its step logged on_step for the loggers (floats, synchronized
        here), and the logger step of that batch (a count of this stage's evaluation batches of that dataloader)."""
        if self.stage == "sanity_check":  # as Lightning: the sanity check logs nothing and counts no batch
            self._eval_step_values.clear()
            return {}, 0
        where = (self.stage, dataloader_idx)
        step = self._eval_batches.get(where, 0)
        self._eval_batches[where] = step + 1
        if not self._eval_step_values:
            return {}, step
        out = {k: float(v.item()) for k, v in self._eval_step_values.items()}
        self._eval_step_values.clear()
        self.logged_metrics.update(out)
        return out, step

    def logged(self) -> dict[str, float]:
        """``trainer.logged_metrics``: what went to the loggers, with the latest value of every step metric bound for
        them, sent yet or not (as Lightning: an epoch shorter than ``log_every_n_steps`` still shows its
        ``train_loss``). Read on demand, so the step pays nothing for it."""
        self._settle()
        for key in self.step_logger_keys:
            value = self.step_values.get(key)
            if value is not None:
                self.logged_metrics[key] = float(value.item())
        return self.logged_metrics

    def end_epoch(self) -> dict[str, float]:
        """Close the epoch aggregates of the current stage: they become callback metrics; returns the logger's."""
        self._settle()
        for_logger: dict[str, float] = {}
        for name, acc in self.epoch.items():
            total = acc.total
            if acc.sync_dist and self.strategy is not None and self.strategy.world_size > 1:
                device = self.strategy.root_device
                if acc.reduce_fx == "mean":
                    pair = torch.stack([total, torch.tensor(acc.weight, dtype=total.dtype)]).to(device)
                    both = self.strategy.reduce_data_parallel(pair, op="sum")
                    total, weight = both[0], float(both[1].item())
                    value = total / weight
                else:
                    value = self.strategy.reduce_data_parallel(total.to(device),
                                                               op=acc.reduce_fx)  # type: ignore[arg-type]
            else:
                value = total / acc.weight if acc.reduce_fx == "mean" else total
                if self.strategy is not None and self.strategy.world_size > 1 and name not in self._unsynced_told:
                    self._unsynced_told.add(name)
                    _warn_unsynced(name)
            self._callback_metrics[name] = value
            if acc.key != name:
                self._callback_metrics[acc.key] = value
            if acc.prog_bar:
                self.prog_bar_keys.add(acc.key)
                self.step_values[acc.key] = value
            if acc.logger:
                for_logger[acc.key] = float(value.item())
        self.epoch.clear()
        if self.objects is not None:
            for_logger.update(self.objects.end_epoch(self))
        self.logged_metrics.update(for_logger)
        return for_logger

    def checkpoint_state(self) -> dict[str, Any]:
        """What a resumed run needs to log and monitor as the uninterrupted one: the training epoch's aggregates so
        far (a mid-epoch resume would otherwise average only the batches after it, and an epoch-end replay log
        nothing) and the latest value of every key (ReduceLROnPlateau at a replayed epoch end reads them).

        Values are ``[number, dtype name]`` pairs, not tensors: each tensor is a record of its own in a
        ``torch.save`` file, and 20 logged keys made every save 0.7 ms slower."""
        self._settle()
        epoch = {name: {"total": _pair(acc.total), "weight": float(acc.weight), "reduce_fx": acc.reduce_fx,
                        "sync_dist": acc.sync_dist, "prog_bar": acc.prog_bar, "logger": acc.logger, "key": acc.key}
                 for name, acc in self._epochs.get("train", {}).items()}
        latest = {k: _pair(v) for k, v in self._callback_metrics.items() if isinstance(v, torch.Tensor) and v.numel() == 1}
        return {"epoch": epoch, "callback_metrics": latest}

    def resume_from(self, state: dict[str, Any], *, mid_epoch: bool) -> None:
        """Put back :meth:`checkpoint_state` (checked by ``metric_resume.logged_state_problems``); the aggregates
        only when the run resumes inside the epoch they belong to."""
        self._callback_metrics.update({k: _tensor(pair) for k, pair in state["callback_metrics"].items()})
        if mid_epoch:
            self._epochs["train"] = {
                name: _Epoch(_tensor(e["total"]), float(e["weight"]), e["reduce_fx"], e["sync_dist"], e["prog_bar"],
                             e["logger"], e["key"]) for name, e in state["epoch"].items()}

    def progress_bar_metrics(self) -> dict[str, float]:
        self._settle()
        return {k: float(self.step_values[k].item()) for k in self.prog_bar_keys if k in self.step_values}

    def show_in_progress_bar(self, values: dict[str, float]) -> None:
        """Make ``values`` this store's progress-bar metrics (a spawned run's, brought back to the caller)."""
        for key, value in values.items():
            self.step_values[key] = torch.tensor(value)
            self.prog_bar_keys.add(key)

    @property
    def epoch(self) -> dict[str, _Epoch]:
        """The epoch aggregates of the current stage (validation mid-epoch keeps training's apart)."""
        return self._epochs.setdefault(self.stage, {})

    def begin(self, stage: Stage) -> None:
        """Start an epoch of ``stage`` with empty aggregates."""
        self.stage = stage
        self._per_step = stage == "train" and not self._in_epoch_end
        self._epochs[stage] = {}
        self._eval_step_values.clear()
        if self.objects is not None:
            self.objects.begin(stage)

    def switch(self, stage: Stage) -> None:
        """Go back to ``stage`` (after validation inside a training epoch) keeping its aggregates."""
        self.stage = stage
        self._per_step = stage == "train" and not self._in_epoch_end
