"""The fit loop: epochs of optimizer steps, with validation and save points in between.

Reading order: :meth:`FitLoop.run` → :meth:`FitLoop._epoch` → :meth:`FitLoop._batch`. The step path calls only the
hooks that someone overrides (resolved once per run) and never synchronizes a logged value.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from xtrain.core._internal.data import resumable_sampler, set_sampler_epoch
from xtrain.core._internal.fit_guards import (
    EpochStart,
    check_epoch_progress,
    nonfinite_check,
    warn_skipped_batches,
    warn_unranked_validation,
)
from xtrain.core._internal.gradient_readers import module_reads_gradients
from xtrain.core._internal.hook_overrides import batch_preparer, module_overrides
from xtrain.core._internal.loops.hooked_step import STEP_HOOKS, hooked_optimizer_step
from xtrain.core._internal.optimizer import requires_closure
from xtrain.core._internal.progress_signal import PROGRESS
from xtrain.core._internal.run_flags import draw_as_reloaded, min_reached, reload_due
from xtrain.core._internal.sampler import SeededBatchSampler
from xtrain.core._internal.step_signature import step_args
from xtrain.core._internal.user_warning import warn_at_user
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

__all__ = ["FitLoop"]


def _batch_end_outputs(output: Any) -> Any:
    """What ``on_train_batch_end`` receives, as in Lightning: ``{"loss": ...}`` for a returned tensor, a returned dict
    as it is, every tensor detached (a hook keeping it must not keep the graph); ``{}`` for a step returning None."""
    if output is None:
        return {}
    if isinstance(output, torch.Tensor):
        return {"loss": output.detach()}
    if isinstance(output, Mapping):
        return {key: value.detach() if isinstance(value, torch.Tensor) else value for key, value in output.items()}
    return output


def _starts_persistent_workers(loader: Any) -> bool:
    """Whether ``iter(loader)`` starts persistent workers that the uninterrupted run had started in an earlier epoch."""
    return (getattr(loader, "persistent_workers", False) and getattr(loader, "num_workers", 0) > 0
            and getattr(loader, "_iterator", None) is None)


def _loss_of(output: Any) -> torch.Tensor | None:
    if output is None or isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict) and "loss" in output:
        loss = output["loss"]
        return loss if isinstance(loss, torch.Tensor) else None
    raise ConfigError("training_step", type(output).__name__, "must return a loss tensor, a dict with a 'loss' "
                      "key, or None.", fix="return the loss tensor.")


class FitLoop:
    """Runs ``trainer.fit``'s training, from where the trainer's progress says it is."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self._deadline = math.inf
        self._timed_out = False
        self._warned_none = False
        self._step_args = step_args(trainer.module.training_step)
        self._prepare = batch_preparer(trainer)
        module = trainer.module
        self._hooked_step = module.automatic_optimization and (
            any(module_overrides(module, name) for name in STEP_HOOKS)
            or any(requires_closure(optimizer) for optimizer in trainer.optimizers[:1]))
        self._zero_grad_hook = module.optimizer_zero_grad if module_overrides(module, "optimizer_zero_grad") else None
        self._epoch_schedulers_stepped = False
        self._release_early = False
        self._released = False  # the last step released the gradients already (see _can_release_early)
        self._module_reads_gradients = module_reads_gradients(module)
        # The callbacks around backward and the optimizer step, resolved per epoch in _batches (as the batch hooks).
        self._before_backward: tuple[Any, ...] = ()
        self._after_backward: tuple[Any, ...] = ()
        self._before_optimizer_step: tuple[Any, ...] = ()
        self._before_zero_grad: tuple[Any, ...] = ()
        self._nonfinite = nonfinite_check(trainer)  # warns at once if it cannot apply (manual optimization)
        self._ran_dry = False  # the epoch ended because its dataloader ran out (see fit_guards.check_epoch_progress)
        self._told_mid_window = False  # warn_unranked_validation, once per fit

    def done(self) -> bool:
        t = self.trainer
        p = t._progress
        return (self._stop_requested() or (t.max_steps != -1 and p.global_step >= t.max_steps)
                or (t.max_epochs != -1 and p.epoch >= t.max_epochs) or self._timed_out)

    def _stop_requested(self) -> bool:
        t = self.trainer
        p = t._progress
        return t.should_stop and (t._preemption.preempted or min_reached(t._flags, p.epoch, p.global_step))

    def _check_time(self) -> None:
        """Whether ``max_time`` has passed, decided by rank 0's clock: ranks that stopped at different batches would
        wait for each other in the next gradient all-reduce (a broadcast a step, only with ``max_time`` and several
        processes)."""
        if self._deadline == math.inf or self._timed_out:
            return
        up = time.monotonic() >= self._deadline
        strategy = self.trainer.strategy
        self._timed_out = bool(strategy.broadcast(up)) if strategy.world_size > 1 else up
        if self._timed_out:
            self.trainer.should_stop = True  # as Lightning's max_time: callbacks see why training ends

    def _validates_before_stopping(self) -> bool:
        """As Lightning: when a batch's end requests the stop (``should_stop`` from a callback, ``max_time``), the
        epoch's validation runs first if this epoch validates, so the last checkpoint ranks the weights it keeps."""
        t = self.trainer
        requested = self._stop_requested() and not t._preemption.preempted  # a preempted job saves, at once
        if not (self._timed_out or requested) or not t._has_validation() or t._val_clock is not None:
            return False
        return t._validates_this_epoch()

    def run(self) -> None:
        t = self.trainer
        t._step_log_due = False  # a row an earlier fit left due when it raised
        t._label_lag = 0  # (the restore used it to find the rows to keep)
        if t.max_time is not None:
            self._deadline = time.monotonic() + t.max_time.total_seconds()
        PROGRESS.begin("train")
        t._preemption.start_training()
        if t.limit_train_batches == 0 or self.done():
            p = t._progress
            if t.limit_train_batches != 0 and (p.epoch > 0 or p.global_step > 0):
                warn_at_user(f"fit has nothing to train: this run already ended (epoch {p.epoch}, global_step "
                              f"{p.global_step}; max_epochs={t.max_epochs}, max_steps={t.max_steps}), in an earlier "
                              f"fit of this Trainer or in the run its checkpoint comes from. To train further, raise "
                              f"max_epochs or max_steps (on a new Trainer, resuming from the checkpoint).",
                              UserWarning)
            return  # as Lightning: nothing to train (limit_train_batches=0, a resumed run that already ended)
        t._hooks.call("on_train_start")
        batches = t._progress.total_batches
        while True:
            self._check_time()
            if self.done():
                break
            self._epoch()
        self._nonfinite.flush()
        warn_skipped_batches(t, self._nonfinite, batches=t._progress.total_batches - batches)
        t._preemption.ending_fit()
        t._label_lag = 0
        t._hooks.call("on_train_end")

    # -- one epoch -----------------------------------------------------------------------------------------------
    def _epoch(self) -> None:
        t = self.trainer
        t._label_lag = 0
        p = t._progress
        resumed = p.batches_in_epoch > 0
        restored_at_start = not resumed and t._pending_rng is not None and p.epoch > 0
        if not resumed:  # before a reload: train_dataloader() and the reload's draws see the saved random state
            t._restore_pending_rng()
        reloading = reload_due(t._flags, p.epoch)
        if reloading and not resumed:
            t._setup_dataloaders("fit")
            draw_as_reloaded(t._train_loader)
        loader = t._train_loader
        sampler = resumable_sampler(loader)
        total = t.num_training_batches
        self._restore_shuffle_generator(sampler, mid_epoch=resumed and p.batches_in_epoch < total)
        t._metrics.begin("train")
        if t._pending_logged is not None:
            t._metrics.resume_from(t._pending_logged, mid_epoch=resumed)
            t._pending_logged = None
        if resumed and p.batches_in_epoch >= total:
            # Saved after the epoch's last step but before its end: only the epoch end is left (the epoch-interval
            # schedulers stepped with that last batch). Iterating would leave the sampler's resume offset pending
            # (samplers are lazy) and empty the next epoch.
            t._pending_sampler = None
            t._restore_pending_rng()
            self._epoch_schedulers_stepped = True
            self._epoch_end(True)
            return
        self._epoch_schedulers_stepped = False
        if not resumed:  # (the saved random state was restored above, before a reload)
            t._hooks.call("on_train_epoch_start")
        if sampler is not None:
            sampler.set_epoch(p.epoch)
            if resumed:
                self._resume_sampler(loader, sampler)
            elif restored_at_start and not reloading and _starts_persistent_workers(loader):
                sampler.expect_fresh_iterator()
        else:
            set_sampler_epoch(loader, p.epoch)
        data = iter(loader)
        if resumed:
            if sampler is None:
                self._skip_by_loading(data, p.batches_in_epoch)
            t._restore_pending_rng()
        start: EpochStart = (p.total_batches, p.global_step, self._nonfinite.skipped)
        self._ran_dry = False
        completed = self._batches(data, total)
        source = t.strategy.join()
        if source is not None:  # uneven inputs: every rank continues from the rank that trained longest
            p.global_step, p.total_batches = t.strategy.broadcast((p.global_step, p.total_batches), src=source)
        if completed:  # an empty stream, or every batch skipped as non-finite: the next epoch would train nothing too
            check_epoch_progress(t, self._nonfinite, ran_dry=self._ran_dry, start=start)
        self._epoch_end(completed)

    def _restore_shuffle_generator(self, sampler: Any, *, mid_epoch: bool) -> None:
        """Set the loader's shuffle generator (``DataLoader(generator=g)``) to the state the checkpoint saved, at the
        first epoch after a restore: here for a loader passed to ``fit`` and one built in ``train_dataloader()``
        alike (that one exists only now), before the epoch draws. The saved state precedes the saved epoch's draws:
        unless the run resumes inside that epoch, the sampler replays them. A checkpoint without the state leaves
        the generator as it is; the restore plan checked the state."""
        saved = self.trainer._pending_sampler or {}
        state = saved.pop("generator_state", None)
        if state is not None and sampler is not None and sampler.draws_from_generator:
            sampler.restore_generator(state, epoch_seed=saved.get("epoch_seed"), mid_epoch=mid_epoch)

    def _resume_sampler(self, loader: Any, sampler: Any) -> None:
        t = self.trainer
        p = t._progress
        saved = t._pending_sampler or {}
        t._pending_sampler = None
        batch_size = loader.batch_sampler.batch_size
        sampler.resume(epoch_seed=saved.get("epoch_seed"), offset=p.batches_in_epoch * batch_size)
        if isinstance(loader.batch_sampler, SeededBatchSampler):
            loader.batch_sampler.first_batch = p.batches_in_epoch

    def _skip_by_loading(self, data: Any, count: int) -> None:
        warnings.warn(f"resuming mid-epoch with a dataloader whose sampler xtrain cannot fast-forward: loading and "
                      f"discarding {count} batches. Use a plain shuffle/sequential sampler for an exact, fast resume.",
                      UserWarning, stacklevel=2)
        for _ in range(count):
            next(data, None)

    def _batches(self, data: Any, total: float) -> bool:
        """Run the epoch's remaining batches; returns whether the epoch ran to its end."""
        t = self.trainer
        p = t._progress
        on_start = t._hooks.get("on_train_batch_start")
        module_start = t._hooks.module_hook("on_train_batch_start")
        on_end = t._hooks.get("on_train_batch_end")
        save_point = t._hooks.get("on_save_point")
        self._before_backward = t._hooks.get("on_before_backward")
        self._after_backward = t._hooks.get("on_after_backward")
        self._before_optimizer_step = t._hooks.get("on_before_optimizer_step")
        self._before_zero_grad = t._hooks.get("on_before_zero_grad")
        self._release_early = self._can_release_early()
        step_plateaus = any(c.interval == "step" and c.needs_metric for c in t.lr_scheduler_configs)
        batch_idx = p.batches_in_epoch
        while batch_idx < total:
            try:
                batch = next(data)
            except StopIteration:
                self._ran_dry = True
                break
            t._label_lag = 0
            batch = self._prepare(batch, 0)
            t._metrics.batch = batch
            last = t.is_last_batch = batch_idx + 1 >= total
            for fn in on_start:
                response = fn(batch, batch_idx)
                # As Lightning: the module's hook returning -1 skips the rest of the epoch (callbacks' are not read).
                if response is not None and fn is module_start and type(response) is int and response == -1:
                    return True
            output, stepped = self._step(batch, batch_idx, last)
            PROGRESS.step("train")
            batch_idx += 1
            p.batches_in_epoch = batch_idx
            p.total_batches += 1
            if last:
                self._step_epoch_schedulers()
            if on_end:
                shown = _batch_end_outputs(output)
                for fn in on_end:
                    fn(shown, batch, batch_idx - 1)
            if t._step_log_due:
                t._write_step_logs()
            self._check_time()
            if t._val_due(batch_idx, last) or (not last and self._validates_before_stopping()):
                if last or batch_idx % t.accumulate_grad_batches == 0 or not t.module.automatic_optimization:
                    t.module.zero_grad()  # as Lightning: gradients are released before validation, unless mid-window
                elif not self._told_mid_window:
                    self._told_mid_window = True
                    warn_unranked_validation(t, batch_idx)
                t._run_validation()
            if stepped and step_plateaus:  # as Lightning: they read what this batch's validation logged
                t._step_schedulers("step", plateau=True, count=batch_idx)
            if stepped:
                t._check_preemption()
                for fn in save_point:
                    fn(epoch_end=False)
            if self.done():
                return batch_idx >= total
        if total == math.inf and t._val_due(batch_idx, True) and t._val_last_batch != (t._progress.epoch, batch_idx):
            t._run_validation()
        return True

    def _can_release_early(self) -> bool:
        """Whether the gradients may be released right after the optimizer step rather than, as Lightning, just
        before the next backward pass: when no hook between the two can read them. Faster (the next forward reuses
        the memory, still warm) and a lower peak (the gradients are not held through the forward pass), unless
        the module's code that runs in between names ``grad`` (``training_step`` may read the previous step's; see
        ``gradient_readers``). The epoch's last step and the run's (``max_steps``) keep them, so epoch-end hooks and
        code reading them after ``fit`` see them as in Lightning."""
        t = self.trainer
        hooks = t._hooks
        return (t.module.automatic_optimization and not self._hooked_step and self._zero_grad_hook is None
                and not self._before_zero_grad and not hooks.may_read_gradients("on_train_batch_end")
                and not hooks.may_read_gradients("on_train_batch_start") and not self._module_reads_gradients)

    def _step(self, batch: Any, batch_idx: int, last: bool) -> tuple[Any, bool]:
        """Forward, backward and (unless accumulating) the optimizer step of one batch."""
        t = self.trainer
        strategy = t.strategy
        if not t.module.automatic_optimization:
            # As in Lightning, global_step counts the optimizer steps training_step took (two optimizers: two),
            # each as it is taken (Trainer._manual_step_taken).
            optimizers = t._strategy_optimizers()
            before = sum(opt.steps for opt in optimizers)
            output = strategy.run_step("training_step", *self._step_args(batch, batch_idx, 0))
            steps = sum(opt.steps for opt in optimizers) - before
            # Logging counts batches here, as Lightning's does: two optimizers still log every n batches.
            t._after_optimizer_step(stepped=False, log_count=t._progress.total_batches + 1)
            return output, steps > 0
        accumulate = t.accumulate_grad_batches
        optimizer = t.optimizers[0]
        if accumulate == 1:
            accumulating, opens = False, True
        else:  # as Lightning: the gradients are zeroed on the first batch of each window (batch_idx % accumulate)
            accumulating = (batch_idx + 1) % accumulate != 0 and not last
            opens = batch_idx % accumulate == 0
        zero = optimizer if opens and not self._released else None
        self._released = False
        if self._hooked_step and not accumulating:
            return self._user_optimizer_step(batch, batch_idx, zero)
        if accumulate > 1 and not strategy.handles_gradient_accumulation:
            with strategy.no_backward_sync(accumulating):
                output, loss = self._forward_backward(batch, batch_idx, accumulate, zero)
        else:
            output, loss = self._forward_backward(batch, batch_idx, 1, zero)
        if accumulating:
            return output, False
        if loss is None:  # training_step returned None: counted; a non-finite loss skipped by on_nonfinite_loss: not
            return output, self._nothing_to_step(not opens) if _loss_of(output) is None else False
        for fn in self._before_optimizer_step:
            fn(optimizer)
        if t.skip_optimizer_step:  # a callback dropped this step (e.g. SpikeDetection): no update, no step counted
            t.skip_optimizer_step = False
            optimizer.zero_grad(set_to_none=True)
            return output, False
        if t.gradient_clip_val:
            strategy.clip_gradients(optimizer, value=t.gradient_clip_val, algorithm=t.gradient_clip_algorithm)
        stepped = strategy.optimizer_step(optimizer)
        p = t._progress
        if self._release_early and accumulate == 1 and not last and p.global_step + 1 != t.max_steps:
            optimizer.zero_grad(set_to_none=True)
            self._released = True
        p.global_step += 1
        t._after_optimizer_step(stepped)
        return output, True

    def _nothing_to_step(self, window_has_grads: bool) -> bool:
        """``training_step`` returned None at the end of a window: as in Lightning, the step still counts (the
        schedulers step, logging and checkpointing see it) and the pre-step hooks run; the optimizer steps on what
        the window's earlier batches accumulated (nothing when this batch opened the window). Warns the first time.
        """
        t = self.trainer
        if not self._warned_none:
            self._warned_none = True
            warnings.warn("training_step returned None, so this batch updates nothing; the step still counts in "
                          "global_step, as in Lightning. If this was on purpose, ignore this warning.", UserWarning,
                          stacklevel=2)
        optimizer = t.optimizers[0]
        for fn in self._before_optimizer_step:
            fn(optimizer)
        if t.skip_optimizer_step:
            t.skip_optimizer_step = False
            optimizer.zero_grad(set_to_none=True)
            return False
        stepped = True
        if window_has_grads:
            if t.gradient_clip_val:
                t.strategy.clip_gradients(optimizer, value=t.gradient_clip_val, algorithm=t.gradient_clip_algorithm)
            stepped = t.strategy.optimizer_step(optimizer)
        t._progress.global_step += 1
        t._after_optimizer_step(stepped)
        return True

    def _user_optimizer_step(self, batch: Any, batch_idx: int,
                             zero: torch.optim.Optimizer | None) -> tuple[Any, bool]:
        t = self.trainer
        accumulate = 1 if t.strategy.handles_gradient_accumulation else t.accumulate_grad_batches
        output, counted = hooked_optimizer_step(t, self._forward_backward, _loss_of, batch, batch_idx, accumulate,
                                                zero)
        if not counted:
            return output, False
        t._progress.global_step += 1
        t._after_optimizer_step(True)
        return output, True

    def _forward_backward(self, batch: Any, batch_idx: int, accumulate: int,
                          zero: torch.optim.Optimizer | None) -> tuple[Any, torch.Tensor | None]:
        """``training_step``, then the zeroing of ``zero``'s gradients (given on a window's first batch), then the
        backward pass: Lightning's closure, so gradients stay readable until the next window starts."""
        t = self.trainer
        output = t.strategy.run_step("training_step", *self._step_args(batch, batch_idx, 0))
        loss = _loss_of(output)
        if zero is not None:
            for fn in self._before_zero_grad:
                fn(zero)
            if self._zero_grad_hook is not None:
                self._zero_grad_hook(t.current_epoch, batch_idx, zero)
            else:
                zero.zero_grad(set_to_none=True)
        if loss is None:
            return output, None
        p = t._progress
        if self._nonfinite.see(loss, p.global_step, p.epoch, batch_idx):
            return output, None
        if accumulate > 1:
            loss = loss / accumulate
        for fn in self._before_backward:
            fn(loss)
        t.strategy.backward(loss)
        for fn in self._after_backward:
            fn()
        return output, loss

    def _step_epoch_schedulers(self) -> None:
        """Step the epoch-interval schedulers other than ReduceLROnPlateau once per epoch, when its last batch is done
        and before its ``on_train_batch_end``, as Lightning; under manual optimization ``training_step`` steps them."""
        t = self.trainer
        if not self._epoch_schedulers_stepped and t.lr_scheduler_configs and t.module.automatic_optimization:
            t._step_schedulers("epoch", plateau=False)
        self._epoch_schedulers_stepped = True

    # -- epoch end -----------------------------------------------------------------------------------------------
    def _epoch_end(self, completed: bool) -> None:
        t = self.trainer
        p = t._progress
        self._nonfinite.flush()
        if completed:  # the epoch ended early (on_train_batch_start returned -1) or a stream ran out
            self._step_epoch_schedulers()
        values = t._metrics.end_epoch()
        with t._metrics.epoch_end_logging():
            t._hooks.call("on_train_epoch_end")
        t._epoch_end_logs(values)
        if not completed:
            return
        if t.module.automatic_optimization:  # ReduceLROnPlateau reads what the epoch-end hooks logged
            t._step_schedulers("epoch", plateau=True)
        p.epoch += 1
        p.batches_in_epoch = 0
        t._check_preemption()
        t._hooks.call("on_save_point", epoch_end=True)
