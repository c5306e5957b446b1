"""Catching a training loss that became NaN or inf: when it first happened, and what to do about it.

``"warn"`` (the default) must not slow the step down. A loss on the CPU is read at once (that synchronizes nothing
and costs less than keeping it). A loss on an accelerator is kept by reference (no device work, no host sync);
every ``every`` losses, where the loggers already read their values, one stacked reduction checks the whole window,
so a GPU is synchronized once per window at a point that synchronizes anyway. Either way the first non-finite loss
is named by its step, epoch and batch.

``"raise"`` and ``"skip"`` act *before* the backward pass of the bad loss, so they must read every loss on the host
(a sync per step) and, with several ranks, agree on it (one small all-gather per step): a rank that sees inf must
not skip a step that another rank takes, or the replicas diverge (and DDP's gradient all-reduce would hang).
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Callable
from typing import Any, Literal

import torch

from xtrain.core._internal.user_warning import warn_at_user
from xtrain.core.errors import ConfigError, NonFiniteLossError

__all__ = ["ENGINE_HINT", "NONFINITE_MODES", "TRAINER_HINT", "NonFiniteCheck", "NonFiniteMode", "check_nonfinite_mode",
           "scaled_by", "skippable_step"]

NonFiniteMode = Literal["warn", "raise", "skip"]
NONFINITE_MODES: tuple[NonFiniteMode, ...] = ("warn", "raise", "skip")

TRAINER_HINT = ("Lower the learning rate, clip gradients (gradient_clip_val) or check the data of that batch; "
                "detect_anomaly=True names the operation that produced it (slow: for debugging only).")
ENGINE_HINT = ("Lower the learning rate, clip gradients (engine.clip_gradients(model, optimizer, max_norm=...)) or "
               "check the data of that batch; torch.autograd.set_detect_anomaly(True) names the operation that "
               "produced it (slow: for debugging only).")


def check_nonfinite_mode(value: object) -> NonFiniteMode:
    """Return ``value`` as a mode, or raise :class:`ConfigError` naming the choices."""
    if value not in NONFINITE_MODES:
        raise ConfigError("on_nonfinite_loss", value, "is not a way to handle a NaN or inf loss.",
                          choices=NONFINITE_MODES, fix="write on_nonfinite_loss='raise' to stop at the first one.")
    return value  # type: ignore[return-value]


def scaled_by(precision: Any) -> str | None:
    """The precision's name when it carries a gradient scaler (``16-mixed``, which skips steps with non-finite
    gradients): :class:`NonFiniteCheck`'s ``scaled_by`` for the Trainer and the Engine alike."""
    return str(precision.name) if getattr(precision, "scaler", None) is not None else None


def _where(step: int, epoch: int, batch_idx: int) -> str:
    """``at step 3 (epoch 0, batch 2)``; the step alone where no dataloader tells the epoch (an Engine loop over
    data it did not set up: its epoch is then -1)."""
    return f"at step {step}" if epoch < 0 else f"at step {step} (epoch {epoch}, batch {batch_idx})"


def _finite(loss: torch.Tensor) -> bool:
    try:
        return math.isfinite(loss.item())  # a one-element loss, nearly always: one read, no reduction
    except RuntimeError:  # several elements (a loss not reduced to one value)
        return bool(torch.isfinite(loss).all())


class NonFiniteCheck:
    """Watches the losses of one run.

    Args:
        mode: ``"warn"``, ``"raise"`` or ``"skip"``.
        every: In ``"warn"`` mode, how many losses are checked together (the logging interval).
        gather: Collects a flag from every rank (``strategy.all_gather``); ``None`` with one process.
        rank: This process's global rank, for messages.
        hint: The advice that ends every message, in the words of the API that runs the loop (Trainer or Engine).
        accumulate: The Trainer's ``accumulate_grad_batches``: ``"skip"`` drops one micro-batch, not a whole
            window, and the message must say so (a user reading "skips that step" expects the window gone).
        counted: Whether the loop reports the count of skipped batches when it ends (the fit loop does), so the
            once-only warning can say that later skips are not lost.
        scaled_by: The name of a precision whose gradient scaler skips steps with non-finite gradients
            (``16-mixed``): a float16 overflow is then routine, and ``"warn"``'s message must not call the weights
            lost.
    """

    __slots__ = ("_accumulate", "_counted", "_gather", "_rank", "_window", "blocking", "every", "found", "hint",
                 "last_skipped", "mode", "scaled_by", "skipped")

    def __init__(self, mode: NonFiniteMode, *, every: int,
                 gather: Callable[[torch.Tensor], torch.Tensor] | None = None, rank: int = 0,
                 hint: str = TRAINER_HINT, accumulate: int = 1, counted: bool = False,
                 scaled_by: str | None = None) -> None:
        self.hint = hint
        self.scaled_by = scaled_by
        self._accumulate, self._counted = accumulate, counted
        self.mode = mode
        self.every = max(1, every)
        self.blocking = mode != "warn"
        self._gather = gather
        self._rank = rank
        self._window: list[tuple[torch.Tensor, int, int, int]] = []
        self.found: str | None = None
        self.skipped = 0
        self.last_skipped = False

    def connect(self, *, gather: Callable[[torch.Tensor], torch.Tensor] | None, rank: int) -> None:
        """Set the ranks' collective once the processes exist (the Engine resolves before it launches)."""
        self._gather, self._rank = gather, rank

    def see(self, loss: torch.Tensor, step: int, epoch: int, batch_idx: int) -> bool:
        """Hand over this step's loss before its backward pass; returns ``True`` when the step must be skipped.

        Raises:
            NonFiniteLossError: In ``"raise"`` mode, when the loss is non-finite on any rank.
        """
        if not self.blocking:
            if self.found is None:
                if loss.is_cpu:  # reading a CPU tensor synchronizes nothing: check it now (cheaper than a window)
                    if not _finite(loss):
                        self._warn(loss, step, epoch, batch_idx)
                    return False
                self._window.append((loss.detach(), step, epoch, batch_idx))
                if len(self._window) >= self.every:
                    self.flush()
            return False
        bad = not _finite(loss)
        ranks = [self._rank] if bad else []
        if self._gather is not None:
            flags = self._gather(torch.tensor([float(bad)], device=loss.device)).reshape(-1).tolist()
            ranks = [r for r, flag in enumerate(flags) if flag]
        self.last_skipped = bool(ranks) and self.mode == "skip"
        if not ranks:
            return False
        where = _where(step, epoch, batch_idx)
        on = f"on rank(s) {ranks} " if self._gather is not None else ""
        if self.mode == "raise":
            value = loss.detach().float().reshape(-1)[0].item() if bad else math.nan
            error = NonFiniteLossError(f"on_nonfinite_loss='raise': the training loss is non-finite {on}{where}"
                                       + (f" (loss={value})" if bad else "")
                                       + ". The optimizer did not apply it; the last checkpoint is the last good "
                                       + "state. " + self.hint)
            error.every_rank = self._gather is not None
            raise error
        self.skipped += 1
        if self.found is None:
            self.found = where
            warn_at_user(f"on_nonfinite_loss='skip': the training loss is non-finite {on}{where}; {self._skips()} "
                         f"(this warning is shown once; {self._later()}). {self.hint}", UserWarning)
        return True

    def _later(self) -> str:
        return "fit ends with a count of the skipped batches" if self._counted else "later ones are skipped silently"

    def _skips(self) -> str:
        every = "every rank skips" if self._gather is not None else "xtrain skips"
        if self._accumulate == 1:
            return f"{every} that step's backward and optimizer step"
        return (f"{every} that batch's backward; with accumulate_grad_batches={self._accumulate} its window still "
                f"takes the optimizer step on its other batches (the sum still divided by {self._accumulate}), "
                f"unless the skipped batch is the window's last: then the window takes no step and the gradients "
                f"of its earlier batches are dropped")

    def flush(self) -> None:
        """Check the losses kept since the last check (``"warn"`` mode); warns once, at the first non-finite one."""
        window, self._window = self._window, []
        if not window or self.found is not None:
            return
        values = torch.stack([entry[0].reshape(()) for entry in window])
        finite = torch.isfinite(values)
        if bool(finite.all()):
            return
        first = int((~finite).nonzero()[0, 0])
        self._warn(*window[first])

    def _warn(self, loss: torch.Tensor, step: int, epoch: int, batch_idx: int) -> None:
        self.found = _where(step, epoch, batch_idx)
        rank = f" on rank {self._rank}" if self._gather is not None else ""
        # Without a sync (warn mode), each rank sees its own loss: a NaN on one rank reaches the others' weights
        # through the gradient all-reduce and their losses a step later, so the earliest rank's warning is the start.
        ranks = (" (each rank warns of its own first one; the lowest step among the ranks' warnings is where it "
                 "started)") if self._gather is not None else ""
        value = loss.detach().float().reshape(-1)[0].item()
        fate = ("and the weights are probably NaN from there" if self.scaled_by is None else
                f"and precision {self.scaled_by!r}'s gradient scaler skips each optimizer step whose gradients are "
                f"non-finite (lowering its scale), so a float16 overflow now and then is routine; a loss that stays "
                f"non-finite is not")
        warn_at_user(f"the training loss became non-finite (loss={value}){rank} {self.found}{ranks}; training goes on "
                     f"(on_nonfinite_loss='warn'), {fate}. on_nonfinite_loss='raise' stops before such a step is "
                     f"applied, 'skip' skips it. {self.hint}", UserWarning)


def skippable_step(optimizer: torch.optim.Optimizer, check: NonFiniteCheck) -> None:
    """Make ``optimizer.step()`` do nothing right after a backward that ``check`` skipped (the Engine's ``"skip"``).

    Skipping only the backward is not enough: momentum, Adam's moments and weight decay would still move the weights.
    The guard is a bound method, as torch's own step: a learning-rate scheduler created later wraps its ``__func__``.
    It sets ``optimizer.step_was_skipped`` (Accelerate's name) on every call.
    """
    step: Callable[..., Any] = optimizer.step
    if getattr(step, "_xtrain_skippable", False):
        return

    @functools.wraps(step)
    def guarded(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        self.step_was_skipped = check.last_skipped  # type: ignore[attr-defined]
        if check.last_skipped:
            return None
        return step(*args, **kwargs)

    guarded._xtrain_skippable = True  # type: ignore[attr-defined]
    optimizer.step = types.MethodType(guarded, optimizer)  # type: ignore[method-assign]
