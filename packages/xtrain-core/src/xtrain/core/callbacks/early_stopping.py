"""Stopping when a monitored metric stops improving, decided on every rank at once."""

from __future__ import annotations

import math
import warnings
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from typing_extensions import override

from xtrain.core.callbacks.callback import Callback
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["EarlyStopping", "EarlyStoppingReason"]


class EarlyStoppingReason(Enum):
    """Why :class:`EarlyStopping` stopped the run (Lightning 2.6's names and values, so saved states agree)."""

    NOT_STOPPED = 0
    STOPPING_THRESHOLD = 1
    DIVERGENCE_THRESHOLD = 2
    PATIENCE_EXHAUSTED = 3
    NON_FINITE_METRIC = 4


class EarlyStopping(Callback):
    """Sets ``trainer.should_stop`` when ``monitor`` has not improved by ``min_delta`` for ``patience`` checks.

    The decision is reduced over ranks (any rank may stop all), so every rank leaves the loop at the same step.

    Args:
        monitor: The logged metric to watch.
        mode: ``"min"`` if lower is better, ``"max"`` if higher is.
        patience: Checks without improvement before stopping.
        min_delta: The smallest change that counts as an improvement; a negative one, as in Lightning, accepts a
            result up to that much worse as an improvement (a lenient patience).
        check_finite: Stop when the metric becomes NaN or infinite.
        stopping_threshold: Stop as soon as the metric is at least this good.
        divergence_threshold: Stop as soon as the metric is worse than this.
        check_on_train_epoch_end: Check after training epochs instead of after validation. The default, as
            Lightning's, checks at each training epoch's end (after that epoch's validation, so a validation metric
            and an epoch-level training metric are both there) when validation runs once an epoch or not at all
            (``val_check_interval=1.0``, ``check_val_every_n_epoch=1``), and after each validation otherwise.
        strict: Raise when ``monitor`` was never logged (``False``: warn once and never stop for it).
        verbose: Print each improvement and the reason for stopping.
        log_rank_zero_only: With ``verbose``, print on rank 0 only (otherwise every rank prints, prefixed with
            its rank).

    A fit resumed from a checkpoint saved after this callback stopped the run stops again at once (Lightning's
    trains on until the next check): a job killed between its last save and its exit, then restarted, ends with the
    weights the uninterrupted job ended with. To train on from such a checkpoint, fit without this callback (or with
    another ``monitor``).

    After a stop, ``stopping_reason`` (an :class:`EarlyStoppingReason`) says which rule stopped it and
    ``stopping_reason_message`` says it in words; both are kept in checkpoints. A rank stopped by another rank's
    decision keeps ``NOT_STOPPED`` with a message saying so (as in Lightning, the rule is known where it fired).
    """

    runs_last: ClassVar[bool] = True

    def __init__(self, monitor: str, *, mode: Literal["min", "max"] = "min", patience: int = 3,
                 min_delta: float = 0.0, check_finite: bool = True, stopping_threshold: float | None = None,
                 divergence_threshold: float | None = None, check_on_train_epoch_end: bool | None = None,
                 strict: bool = True, verbose: bool = False, log_rank_zero_only: bool = False) -> None:
        if mode not in ("min", "max"):
            raise ConfigError("mode", mode, "is not an EarlyStopping mode.", choices=["min", "max"],
                              fix="write mode='min' when lower is better.")
        if not isinstance(patience, int) or patience < 0:
            raise ConfigError("patience", patience, "must be a non-negative int.", fix="write patience=3.")
        if not isinstance(monitor, str):
            raise ConfigError("monitor", monitor, "must be the name of a logged metric.", fix="write monitor='val_loss'.")
        for name, value, example in (("min_delta", min_delta, "0.01"), ("stopping_threshold", stopping_threshold, "0.1"),
                                     ("divergence_threshold", divergence_threshold, "10.0")):
            if (value is not None or name == "min_delta") and not _number(value):
                raise ConfigError(name, value, "must be a number (it is compared with the monitored metric).",
                                  fix=f"write {name}={example}" + (" (not a string)." if isinstance(value, str) else "."))
        self.monitor = monitor
        self.mode = mode
        self.patience = patience
        self.min_delta = min_delta
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.check_on_train_epoch_end = check_on_train_epoch_end
        self.strict = strict
        self.verbose = verbose
        self.log_rank_zero_only = log_rank_zero_only
        self._warned_missing = False
        self._stop_on_resume = False
        self.wait_count = 0
        self._best = math.inf if mode == "min" else -math.inf
        self.stopped_epoch = 0
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None

    @property
    def stop_reason(self) -> str:
        """``stopping_reason_message``, or ``""`` before a stop (the name of release 1)."""
        return self.stopping_reason_message or ""

    @property
    def best_score(self) -> torch.Tensor:
        """The best monitored value so far, a 0-d tensor as in Lightning (``.item()`` gives the float)."""
        return torch.tensor(self._best)

    @best_score.setter
    def best_score(self, value: torch.Tensor | float) -> None:
        self._best = float(value)

    @property
    @override
    def state_key(self) -> str:
        return f"EarlyStopping[monitor={self.monitor},mode={self.mode}]"

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"wait_count": self.wait_count, "best_score": self._best, "stopped_epoch": self.stopped_epoch,
                "patience": self.patience, "stopping_reason": self.stopping_reason.value,
                "stopping_reason_message": self.stopping_reason_message}

    @override
    def load_state_dict(self, state: dict[str, Any], /) -> None:
        self.wait_count = state["wait_count"]
        self.best_score = state["best_score"]  # a float (a tensor in Lightning's checkpoints)
        self.stopped_epoch = state["stopped_epoch"]
        reason = state.get("stopping_reason", EarlyStoppingReason.NOT_STOPPED.value)
        known = {member.value for member in EarlyStoppingReason}
        self.stopping_reason = EarlyStoppingReason(reason if reason in known else 0)
        message = state.get("stopping_reason_message")
        self.stopping_reason_message = message if isinstance(message, str) else None
        self._stop_on_resume = self.stopping_reason_message is not None  # set only when this callback stopped a fit

    @override
    def on_fit_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        if not self._stop_on_resume:
            return
        self._stop_on_resume = False
        trainer.should_stop = True  # the fit loop ends before any batch (once min_epochs/min_steps are met)
        if trainer.is_global_zero:
            warnings.warn(f"EarlyStopping: the checkpoint was saved after this callback stopped the run "
                          f"({self.stopping_reason_message}), so the resumed fit stops too, where the uninterrupted "
                          f"one ended. To train on from it, fit without this EarlyStopping (or with another "
                          f"monitor).", UserWarning, stacklevel=2)

    def _on_train_epoch(self, trainer: Trainer) -> bool:
        if self.check_on_train_epoch_end is not None:
            return self.check_on_train_epoch_end
        return trainer.val_check_interval == 1.0 and trainer.check_val_every_n_epoch == 1

    @override
    def on_validation_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        # trainer.validate() and the sanity check never stop a run (nor count towards patience), as in Lightning.
        if trainer.state == "fit" and not trainer.sanity_checking and not self._on_train_epoch(trainer):
            self._check(trainer)

    @override
    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        if self._on_train_epoch(trainer):
            self._check(trainer)

    def _improved(self, value: float) -> bool:
        if self.mode == "min":
            return value < self._best - self.min_delta
        return value > self._best + self.min_delta

    def _check(self, trainer: Trainer) -> None:
        metric = trainer.callback_metrics.get(self.monitor)
        if metric is None and not self.strict:
            if not self._warned_missing:
                warnings.warn(f"EarlyStopping: {self.monitor!r} was not logged (available: "
                              f"{sorted(trainer.callback_metrics)}); not stopping for it (strict=False).",
                              UserWarning, stacklevel=2)
                self._warned_missing = True
            return
        if metric is None:
            raise ConfigError("monitor", self.monitor, "was never logged, so EarlyStopping cannot watch it.",
                              choices=sorted(trainer.callback_metrics),
                              fix=f"log it with self.log({self.monitor!r}, value), or monitor a logged key.")
        value = float(metric.item() if isinstance(metric, torch.Tensor) else metric)
        stop, reason, why = False, "", EarlyStoppingReason.NOT_STOPPED
        sign = 1.0 if self.mode == "min" else -1.0
        # Thresholds compare strictly, as Lightning's: a metric equal to stopping_threshold has not reached it.
        if self.check_finite and not math.isfinite(value):
            stop, why, reason = True, EarlyStoppingReason.NON_FINITE_METRIC, f"{self.monitor} = {value} is not finite"
        elif self.stopping_threshold is not None and sign * value < sign * self.stopping_threshold:
            stop, why = True, EarlyStoppingReason.STOPPING_THRESHOLD
            reason = f"{self.monitor} = {value:.6g} reached the stopping threshold {self.stopping_threshold}"
        elif self.divergence_threshold is not None and sign * value > sign * self.divergence_threshold:
            stop, why = True, EarlyStoppingReason.DIVERGENCE_THRESHOLD
            reason = f"{self.monitor} = {value:.6g} passed the divergence threshold {self.divergence_threshold}"
        elif self._improved(value):
            self._best, self.wait_count = value, 0
            self._say(trainer, f"{self.monitor} improved to {value:.6g}")
        else:
            self.wait_count += 1
            if self.wait_count >= self.patience:
                stop, why = True, EarlyStoppingReason.PATIENCE_EXHAUSTED
                reason = f"{self.monitor} did not improve for {self.wait_count} checks (best {self._best:.6g})"
        stop = trainer.strategy.reduce_boolean_decision(stop, all=False)
        if stop:
            trainer.should_stop = True
            self.stopped_epoch = trainer.current_epoch
            self.stopping_reason = why
            self.stopping_reason_message = reason or "another rank decided to stop"
            self._say(trainer, f"stopping: {self.stopping_reason_message}")

    def _say(self, trainer: Trainer, message: str) -> None:
        if not self.verbose:
            return
        if trainer.world_size == 1:
            print(f"EarlyStopping: {message}")
        elif not self.log_rank_zero_only or trainer.is_global_zero:
            print(f"[rank {trainer.global_rank}] EarlyStopping: {message}")


def _number(value: object) -> bool:
    """Whether ``value`` reads as one number, as Lightning takes it: a Python, numpy or one-element tensor value (a
    string such as ``"0.1"`` is not; it failed after the first epoch)."""
    if isinstance(value, (str, bytes)):
        return False
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, RuntimeError):
        return False
    return True
