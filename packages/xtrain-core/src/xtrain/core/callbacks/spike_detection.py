"""Detecting loss spikes: warn, skip the optimizer step, or stop training."""

from __future__ import annotations

import math
import warnings
from collections import deque
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from typing_extensions import override

from xtrain.core.callbacks.callback import Callback
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["SpikeDetection"]

Mode = Literal["warn", "skip", "stop"]


class SpikeDetection(Callback):
    """Watches the training loss and reacts when one step's loss jumps far above the recent running mean.

    A loss is a spike when it is not finite, or (once ``warmup`` losses are known) when it exceeds the mean of the last
    ``window`` normal losses by more than ``atol`` or by more than ``rtol`` times that mean. Every spike is recorded in
    :attr:`spikes` (global step, epoch, batch index, loss) and saved in checkpoints.

    The check reads the loss on the host before each optimizer step (one device synchronization per step, and under
    multi-process strategies one all-reduce so every rank takes the same decision on the mean loss); it applies to
    automatic optimization.

    Args:
        mode: ``"warn"``: record and warn; ``"skip"``: also drop the step (its gradients are discarded, no
            parameter, optimizer state or step counter changes); ``"stop"``: also end training after that step.
        window: How many recent normal losses form the running mean.
        warmup: Losses seen before spikes are judged (non-finite losses are always spikes).
        atol: Absolute excess over the mean that makes a spike (``None``: not used).
        rtol: Excess relative to the mean that makes a spike (``None``: not used).
    """

    reads_gradients: ClassVar[bool] = False

    def __init__(self, *, mode: Mode = "skip", window: int = 10, warmup: int = 10, atol: float | None = None,
                 rtol: float | None = 2.0) -> None:
        if mode not in ("warn", "skip", "stop"):
            raise ConfigError("mode", mode, "is not a SpikeDetection mode.", choices=["warn", "skip", "stop"],
                              fix="write mode='skip'.")
        if not isinstance(window, int) or window < 1:
            raise ConfigError("window", window, "must be a positive int.", fix="write window=10.")
        if atol is None and rtol is None:
            raise ConfigError("rtol", rtol, "and atol are both None, so no loss could be a spike.",
                              fix="write rtol=2.0 (a loss three times the running mean is a spike).")
        self.mode = mode
        self.window = window
        self.warmup = max(1, warmup)
        self.atol = atol
        self.rtol = rtol
        self.spikes: list[dict[str, Any]] = []
        self._recent: deque[float] = deque(maxlen=window)
        self._seen = 0
        self._loss: torch.Tensor | None = None
        self._batch_idx = 0

    def is_spike(self, loss: float) -> bool:
        """Whether ``loss`` is a spike given the losses seen so far."""
        if not math.isfinite(loss):
            return True
        if self._seen < self.warmup or not self._recent:
            return False
        mean = sum(self._recent) / len(self._recent)
        return ((self.atol is not None and loss > mean + self.atol)
                or (self.rtol is not None and loss > mean + self.rtol * abs(mean)))

    @override
    def on_train_batch_start(self, trainer: Trainer, module: TrainModule, batch: Any, batch_idx: int, /) -> None:
        self._batch_idx = batch_idx

    @override
    def on_before_backward(self, trainer: Trainer, module: TrainModule, loss: torch.Tensor, /) -> None:
        # Under accumulation each micro-batch's loss is already divided by the window: their sum is the step's loss.
        self._loss = loss.detach() if self._loss is None else self._loss + loss.detach()

    @override
    def on_before_optimizer_step(self, trainer: Trainer, module: TrainModule,
                                 optimizer: torch.optim.Optimizer, /) -> None:
        if self._loss is None:
            return
        loss = self._loss.float()
        self._loss = None
        if trainer.world_size > 1:
            loss = trainer.strategy.reduce(loss, "mean")
        value = float(loss)
        if not self.is_spike(value):
            self._recent.append(value)
            self._seen += 1
            return
        record = {"global_step": trainer.global_step, "epoch": trainer.current_epoch, "batch_idx": self._batch_idx,
                  "loss": value}
        self.spikes.append(record)
        action = {"warn": "continuing", "skip": "skipping this optimizer step",
                  "stop": "skipping this optimizer step and stopping"}[self.mode]
        if trainer.is_global_zero:
            warnings.warn(f"SpikeDetection: loss spike {value:.6g} at epoch {record['epoch']}, batch "
                          f"{record['batch_idx']} (global step {record['global_step']}); {action}.",
                          UserWarning, stacklevel=2)
        if self.mode in ("skip", "stop"):
            trainer.skip_optimizer_step = True
        if self.mode == "stop":
            trainer.should_stop = True

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"recent": list(self._recent), "seen": self._seen, "spikes": list(self.spikes)}

    @override
    def load_state_dict(self, state: dict[str, Any], /) -> None:
        self._recent = deque(state.get("recent", []), maxlen=self.window)
        self._seen = int(state.get("seen", 0))
        self.spikes = list(state.get("spikes", []))
