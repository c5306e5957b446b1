"""Runs that can make no progress, caught once per epoch or once per fit (never per step).

A run whose epochs train nothing does not crash: with ``max_steps`` and no ``max_epochs`` it loops over empty epochs
forever at full CPU, and with ``max_epochs`` it "succeeds" at ``global_step`` 0 and writes checkpoints of the
untrained weights. Two causes can only be seen once an epoch has run:

- a training stream (an ``IterableDataset``, which has no length to check before training) that yields nothing;
- ``on_nonfinite_loss="skip"`` skipping every batch of an epoch, so no optimizer step is ever taken.

Both end the run at the end of that epoch. The fit loop also gets its advice for a non-finite loss here, fitted to
the Trainer's settings (advice to turn on what is already on sends the user in a circle), a warning at fit start
when ``on_nonfinite_loss`` cannot apply (manual optimization), and a count of the skipped batches at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xtrain.core._internal.data import LoaderShape
from xtrain.core._internal.nonfinite import TRAINER_HINT, NonFiniteCheck, scaled_by
from xtrain.core._internal.user_warning import warn_at_user
from xtrain.core.errors import ConfigError, NonFiniteLossError

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

__all__ = ["EpochStart", "check_epoch_progress", "nonfinite_check", "nonfinite_hint", "warn_skipped_batches",
           "warn_unchecked_manual", "warn_unranked_validation"]

EpochStart = tuple[int, int, int]
"""``(total_batches, global_step, skipped)`` when an epoch's batches begin: what the epoch's end compares with."""


def nonfinite_check(trainer: Trainer) -> NonFiniteCheck:
    """The fit's non-finite loss check, its messages fitted to the Trainer's settings; warns at once when
    ``on_nonfinite_loss`` cannot apply (see :func:`warn_unchecked_manual`)."""
    strategy, mode = trainer.strategy, trainer.on_nonfinite_loss
    warn_unchecked_manual(trainer)
    hint = nonfinite_hint(gradient_clip_val=trainer.gradient_clip_val, detect_anomaly=trainer._flags.detect_anomaly,
                          blocking=mode != "warn")
    return NonFiniteCheck(mode, every=trainer.log_every_n_steps, rank=strategy.global_rank, hint=hint,
                          gather=strategy.all_gather if strategy.world_size > 1 else None,
                          accumulate=trainer.accumulate_grad_batches, counted=True,
                          scaled_by=scaled_by(strategy.precision))


def nonfinite_hint(*, gradient_clip_val: float | None, detect_anomaly: bool, blocking: bool) -> str:
    """The advice that ends a non-finite loss message, fitted to what the Trainer already does.

    Args:
        gradient_clip_val: The Trainer's clipping; when set, "clip gradients" would be advice the user already took.
        detect_anomaly: Whether anomaly mode is on.
        blocking: Whether the check stops before the backward pass (``"raise"``, ``"skip"``): anomaly mode looks at
            the backward pass, so under those modes it never gets to name the operation.
    """
    if not gradient_clip_val and not detect_anomaly:
        return TRAINER_HINT
    if gradient_clip_val:
        text = (f"Lower the learning rate or gradient_clip_val (clipping is already on, at {gradient_clip_val}), or "
                f"check the data of that batch; ")
    else:
        text = "Lower the learning rate, clip gradients (gradient_clip_val) or check the data of that batch; "
    if not detect_anomaly:
        return text + "detect_anomaly=True names the operation that produced it (slow: for debugging only)."
    if blocking:
        return text + ("detect_anomaly=True is on but cannot name the operation: this check stops before the "
                       "backward pass, where anomaly mode looks. To find it, run once with on_nonfinite_loss='warn' "
                       "and detect_anomaly=True: the backward pass then raises at the first operation whose "
                       "gradient is NaN.")
    return text + "detect_anomaly=True is on: the backward pass of this loss raises and names the backward operation."


def warn_unchecked_manual(trainer: Trainer) -> None:
    """Warn at fit start when ``on_nonfinite_loss`` was set but cannot apply: under manual optimization the user's
    ``training_step`` runs the backward pass and the optimizer step, so xtrain never sees the loss before them; a
    user who asked for ``"raise"`` would otherwise get NaN weights without a word."""
    mode = trainer.on_nonfinite_loss
    if mode == "warn" or trainer.module.automatic_optimization or trainer.global_rank != 0:
        return
    action = ("raise an error" if mode == "raise" else
              "return None without stepping (with several ranks, agree on it first through self.all_gather, or the "
              "ranks' backward passes wait for each other forever)")
    warn_at_user(f"on_nonfinite_loss={mode!r} is not applied under manual optimization (automatic_optimization="
                 f"False): your training_step runs the backward pass and the optimizer step itself, so xtrain never "
                 f"sees the loss before them. Check it in training_step before self.manual_backward(loss): if not "
                 f"torch.isfinite(loss).all(), {action}. Or leave on_nonfinite_loss at its default.", UserWarning)


def check_epoch_progress(trainer: Trainer, check: NonFiniteCheck, *, ran_dry: bool, start: EpochStart) -> None:
    """End the run after an epoch that trained nothing and whose next epoch would train nothing either.

    Called once per completed epoch, after the ranks agreed on the progress (``strategy.join``), so under uneven
    inputs a rank whose stream was empty is not refused while another rank trained.

    Args:
        trainer: The running Trainer.
        check: The run's non-finite loss check (its count of skipped batches).
        ran_dry: Whether the epoch ended because its dataloader ran out (not ``on_train_batch_start`` returning -1).
        start: :data:`EpochStart` when the epoch's batches began.

    Raises:
        ConfigError: The training stream yielded no batch at all in its first epoch (a later empty epoch ends the
            fit with a warning instead: the earlier epochs trained).
        NonFiniteLossError: ``on_nonfinite_loss="skip"`` skipped batches and the epoch took no optimizer step.
    """
    p = trainer._progress
    batches, steps, skipped = start
    if ran_dry and p.batches_in_epoch == 0 and p.total_batches == batches:
        if p.total_batches == 0:
            raise _empty_stream(trainer)
        # Earlier epochs trained: end the fit as max_epochs would (their checkpoints stand), not with an error.
        warn_at_user(f"the training stream yielded no batch in epoch {p.epoch}, after {p.total_batches} batches in "
                     f"earlier epochs: its __iter__ does not start over (an iterator or generator used up after one "
                     f"pass?), so every later epoch would train nothing (with max_steps and no max_epochs, forever). "
                     f"Training stops here. Fix: make __iter__ return a fresh iterator on every call (write it as a "
                     f"generator function), or set max_epochs to end training when the data does.", UserWarning)
        trainer.should_stop = True
        return
    skipped = check.skipped - skipped
    if skipped and p.global_step == steps:
        raise NonFiniteLossError(
            f"on_nonfinite_loss='skip' skipped {skipped} of the {p.total_batches - batches} batches of epoch "
            f"{p.epoch} (their loss was non-finite) and the epoch took no optimizer step, so training cannot "
            f"progress: the weights do not change, so the next epoch would see the same losses (with max_steps set, "
            f"fit would never end). Nothing was applied; the checkpoints hold the last good state. The first was "
            f"{check.found}. {check.hint}")


def _empty_stream(trainer: Trainer) -> ConfigError:
    return ConfigError("train_dataloaders", LoaderShape(trainer._train_loader), "yielded no batch in its first epoch: "
                       "a stream (an IterableDataset) has no length to check before training, and this one is empty, "
                       "so fit could never take a step (with max_steps and no max_epochs it would loop over empty "
                       "epochs forever).", fix="check how the stream is built (does __iter__ yield anything? does a "
                       "filter drop every sample?); it must yield at least one batch per epoch.")


def warn_skipped_batches(trainer: Trainer, check: NonFiniteCheck, *, batches: int) -> None:
    """At the end of a fit that skipped batches, say how many: the per-batch warning is shown once only, so without
    this a run that skipped half its batches looks like one that skipped one.

    Args:
        trainer: The Trainer whose fit ends.
        check: The run's non-finite loss check.
        batches: How many training batches this fit ran.
    """
    if not check.skipped or trainer.global_rank != 0:
        return
    unit = "steps" if trainer.accumulate_grad_batches == 1 else "batches (micro-batches of accumulated steps)"
    warn_at_user(f"on_nonfinite_loss='skip' skipped {check.skipped} of {batches} {unit} in this fit: their loss was "
                 f"non-finite, so they trained nothing (global_step {trainer._progress.global_step} counts only the "
                 f"optimizer steps taken). The first was {check.found}.", UserWarning)


def warn_unranked_validation(trainer: Trainer, batch_idx: int) -> None:
    """Once per fit, when a validation runs inside a gradient accumulation window and a ModelCheckpoint ranks by a
    metric: checkpoints are saved only after optimizer steps (a resume from one is exact; inside a window the
    accumulated gradients would be lost), so that validation's value is never ranked and the best can be missed."""
    ranking = [cb.monitor for cb in trainer.checkpoint_callbacks if cb.monitor is not None]
    if not ranking:
        return
    k = trainer.accumulate_grad_batches
    every = trainer.val_check_batch
    suggest = max(k, round(every / k) * k) if every != float("inf") else k
    warn_at_user(f"the validation after batch {batch_idx} of epoch {trainer.current_epoch} runs inside a gradient "
                 f"accumulation window (accumulate_grad_batches={k}): ModelCheckpoint saves only after optimizer "
                 f"steps, where a resume is exact, so it cannot rank this validation's {ranking[0]!r} (nor any other "
                 f"taken mid-window) and the best checkpoint may miss it. Fix: make validations follow optimizer "
                 f"steps, e.g. val_check_interval={suggest} (a multiple of accumulate_grad_batches).", UserWarning)
