"""Measuring how long each stage runs, and stopping training after a time budget."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from typing_extensions import override

from xtrain.core._internal.trainer_args import parse_max_time
from xtrain.core.callbacks.callback import Callback
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["Timer"]

Stage = Literal["train", "validate", "test"]
_STAGES: tuple[Stage, ...] = ("train", "validate", "test")


class Timer(Callback):
    """Times the train, validate and test stages and stops training once ``duration`` of training has passed.

    Unlike ``Trainer(max_time=...)`` it can be queried (:meth:`time_elapsed`, :meth:`time_remaining`) and its
    training time is saved in checkpoints, so a resumed run continues the same budget. The stop is decided on every
    rank at once (one small collective per check under multi-process strategies).

    Args:
        duration: ``"DD:HH:MM:SS"``, a timedelta or a dict like ``{"hours": 1}``; ``None`` only measures.
        interval: Check after every ``"step"`` or at the end of every ``"epoch"``.
        verbose: Print on rank 0 when the time is up.
    """

    reads_gradients: ClassVar[bool] = False

    def __init__(self, duration: str | timedelta | dict[str, int] | None = None, *,
                 interval: Literal["step", "epoch"] = "step", verbose: bool = True) -> None:
        if interval not in ("step", "epoch"):
            raise ConfigError("interval", interval, "is not a Timer interval.", choices=["step", "epoch"],
                              fix="write interval='step'.")
        self.duration = parse_max_time(duration, argument="duration")
        self.interval = interval
        self.verbose = verbose
        self._start: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._end: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._offset = 0.0

    def start_time(self, stage: Stage = "train") -> float | None:
        """When ``stage`` last started (``time.monotonic``), or ``None``."""
        return self._start[stage]

    def end_time(self, stage: Stage = "train") -> float | None:
        """When ``stage`` last ended (``time.monotonic``), or ``None`` while it runs."""
        return self._end[stage]

    def time_elapsed(self, stage: Stage = "train") -> float:
        """Seconds ``stage`` has run (training includes the time before a resume)."""
        start, end = self._start[stage], self._end[stage]
        offset = self._offset if stage == "train" else 0.0
        if start is None:
            return offset
        return offset + ((end if end is not None else time.monotonic()) - start)

    def time_remaining(self, stage: Stage = "train") -> float | None:
        """Seconds of ``duration`` left (``None`` without a duration)."""
        if self.duration is None:
            return None
        return self.duration.total_seconds() - self.time_elapsed(stage)

    def _begin(self, stage: Stage) -> None:
        self._start[stage] = time.monotonic()
        self._end[stage] = None

    def _finish(self, stage: Stage) -> None:
        self._end[stage] = time.monotonic()

    @override
    def on_train_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        self._begin("train")

    @override
    def on_train_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        self._finish("train")

    @override
    def on_validation_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        self._begin("validate")

    @override
    def on_validation_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        self._finish("validate")

    @override
    def on_test_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        self._begin("test")

    @override
    def on_test_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        self._finish("test")

    def _check(self, trainer: Trainer) -> None:
        if self.duration is None or trainer.should_stop:
            return
        up = self.time_elapsed("train") >= self.duration.total_seconds()
        if trainer.world_size > 1:
            up = trainer.strategy.reduce_boolean_decision(up, all=False)
        if up:
            trainer.should_stop = True
            if self.verbose and trainer.is_global_zero:
                print(f"Timer: the training time of {self.duration} is up; stopping at step {trainer.global_step}.")

    @override
    def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any,
                           batch_idx: int, /) -> None:
        if self.interval == "step":
            self._check(trainer)

    @override
    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        if self.interval == "epoch":
            self._check(trainer)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": {stage: self.time_elapsed(stage) for stage in _STAGES}}

    @override
    def load_state_dict(self, state: dict[str, Any], /) -> None:
        self._offset = float(state.get("time_elapsed", {}).get("train", 0.0))
