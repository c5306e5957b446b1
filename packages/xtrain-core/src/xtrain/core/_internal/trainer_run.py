"""How one ``fit``/``validate``/``test``/``predict`` runs in each process: set up, run the stage, tear down.

A mixin of :class:`~xtrain.core.Trainer`, kept apart from its public entry points so that ``trainer.py`` reads as
the API and this module as the order of a run's steps (hooks, checkpoint restore, loggers, the loop, cleanup).
"""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import torch

from xtrain.core._internal.auto_resume import note_failure, note_preemption, resolve_auto, start_attempt
from xtrain.core._internal.callback_states import check_unique_state_keys
from xtrain.core._internal.checkpoint_agreement import check_same_checkpoint, check_same_position
from xtrain.core._internal.checkpointing import restore_checkpoint, restore_targets
from xtrain.core._internal.data import shut_down_workers
from xtrain.core._internal.hook_overrides import module_overrides
from xtrain.core._internal.hooks import HookDispatcher
from xtrain.core._internal.hparams import loggable_hparams
from xtrain.core._internal.loops.evaluation import results_per_dataloader, run_evaluation, run_predict
from xtrain.core._internal.loops.fit import FitLoop
from xtrain.core._internal.model_setup import configure_model
from xtrain.core._internal.optim import follow_replaced_optimizers, parse_optimizers
from xtrain.core._internal.preemption import exit_failed_on_sigterm
from xtrain.core._internal.profiling import active_profiler, profiling
from xtrain.core._internal.rng import collect_rng_states, restore_rng_states
from xtrain.core._internal.run_dirs import new_log_dirs, remove_empty_log_dirs, remove_log_dirs
from xtrain.core._internal.run_flags import ValClock, anomaly_detection, sync_batchnorm
from xtrain.core._internal.train_mode import warn_eval_modules
from xtrain.core._internal.trainer_args import check_callbacks
from xtrain.core._internal.trainer_data import StageLoaders
from xtrain.core._internal.trainer_services import LoopServices
from xtrain.core.errors import ConfigError, SIGTERMException
from xtrain.core.rank_zero import rank_zero_only

if TYPE_CHECKING:
    from xtrain.core._internal.auto_resume import Healing
    from xtrain.core._internal.preemption import Preemption
    from xtrain.core._internal.progress import FitProgress
    from xtrain.core._internal.run_lock import RunLock
    from xtrain.core.callbacks.callback import Callback
    from xtrain.core.module import TrainModule
    from xtrain.core.profilers.profiler import Profiler
    from xtrain.core.strategy import Strategy
    from xtrain.core.trainer import Trainer

__all__ = ["RunLifecycle", "Stage"]

Stage = Literal["fit", "validate", "test", "predict"]


class RunLifecycle(StageLoaders, LoopServices):
    """The Trainer's run, from ``_run`` (what a launcher calls in every process) to ``_teardown`` (mixed in).

    It sets up the stage's loaders and the loggers' flush on abort, so it builds on those two mixins. The loops and
    checkpoint helpers take the whole Trainer, so ``self`` is handed to them as one.
    """

    state: Stage | None
    should_stop: bool
    profiler: Profiler
    callbacks: list[Callback]
    optimizers: list[torch.optim.Optimizer]
    accumulate_grad_batches: int
    num_sanity_val_steps: int
    sanity_checking: bool
    _running: bool
    _loaders_ready: Stage | None
    _user_callbacks: list[Callback]
    _hooks: HookDispatcher
    _preemption: Preemption
    _run_lock: RunLock
    _healing: Healing
    _ckpt_path: str | Path | None
    _ckpt_requested: str | Path | None  # ckpt_path as fit/validate/... got it ("last"), before it was resolved
    _ckpt_problem: ConfigError | None  # why this process could not resolve it (several nodes: reported together)
    _progress: FitProgress
    _pending_logged: dict[str, Any] | None
    _setup_module: TrainModule | None
    _optimizer_module: TrainModule | None
    _val_clock: ValClock | None
    _return_predictions: bool

    if TYPE_CHECKING:  # defined on the Trainer and LightningAttributes
        @property
        def num_sanity_val_batches(self) -> list[float]: ...
        def _has_validation(self) -> bool: ...

    def _run(self, stage: Stage, ckpt_path: str | Path | None, return_state: bool) -> Any:
        self.state = stage
        self._running = True
        self._loaders_ready = None
        self.should_stop = False
        self.strategy.setup_environment()
        rank_zero_only.rank = self.strategy.global_rank
        self._new_log_dirs: list[Path] = []
        status = "success"
        try:
            with self._preemption.installed() if stage == "fit" else nullcontext():
                return self._run_body(stage, ckpt_path, return_state)
        except BaseException as exc:
            status = "interrupted" if isinstance(exc, (KeyboardInterrupt, SIGTERMException)) else "failed"
            if self._preemption.stopped_together(exc):  # a stop every rank made at one save point: no failure
                note_preemption(cast("Trainer", self), signalled=self._preemption.signal_number is not None)
            else:
                note_failure(cast("Trainer", self), exc)
                if status == "failed" and self.strategy.world_size > 1:
                    exit_failed_on_sigterm()
                if getattr(exc, "every_rank", False) is not True:  # one rank's error: the others are stopped
                    self.strategy.on_exception(exc)
            self._hooks.call_callbacks("on_exception", exc)
            raise
        finally:
            try:
                self._teardown(stage, status)
            finally:
                self._running = False
                self._run_lock.release()

    def _run_body(self, stage: Stage, ckpt_path: str | Path | None, return_state: bool) -> Any:
        trainer = cast("Trainer", self)
        self._pending_logged = None  # a failed earlier fit's restore must not reach this one
        self._setup(stage)
        loaded = None
        if ckpt_path == "auto":
            ckpt_path = resolve_auto(trainer, self._healing, self._run_lock)
        self._ckpt_path = ckpt_path
        requested = self._ckpt_requested
        check_same_checkpoint(self.strategy, requested, ckpt_path, self._ckpt_problem)
        fitting = stage == "fit"
        from xtrain.core.sharded_checkpoint import is_sharded

        # A sharded checkpoint is read into the optimizers' shards, so they must exist before the file is read.
        configure_first = fitting and (ckpt_path is None or is_sharded(ckpt_path))
        if configure_first:
            self._configure_optimizers()
        if ckpt_path is not None:
            loaded = self.strategy.load_checkpoint(ckpt_path, targets=restore_targets(trainer, fitting=fitting))
            restore_checkpoint(trainer, loaded, str(ckpt_path), fitting=fitting,
                               configure_optimizers=self._configure_optimizers if fitting and not configure_first
                               else None)
        # As Lightning: a fit that resumes a run's state does not sanity-check again (that run did).
        resuming = fitting and loaded is not None and "loops" in loaded
        progress = self._progress
        check_same_position(self.strategy, requested, ckpt_path,
                            (progress.epoch, progress.global_step, progress.batches_in_epoch))
        # After the restore, as Lightning: a DataModule whose loaders depend on its state (a curriculum) builds
        # them from the restored state (unless configure_optimizers asked for them first, as in Lightning).
        if self._loaders_ready != stage:
            self._setup_dataloaders(stage)
        if stage == "fit":  # with the loaders: a position saved at another world size is counted in their batches
            start_attempt(trainer, self._healing, loaded)
        self._setup_loggers()
        profiler = active_profiler(self.profiler)
        if profiler is None:
            output = self._run_stage(stage, resuming=resuming)
        else:
            with profiling(profiler, trainer, stage=stage):
                output = self._run_stage(stage, resuming=resuming)
        if return_state:
            from xtrain.core._internal.spawn import worker_result

            output = worker_result(trainer, output)
        return output

    def _setup(self, stage: Stage) -> None:
        module, strategy = self.module, self.strategy
        dm = self.datamodule
        # As Lightning: the module's callbacks join first; setup runs on the datamodule, the callbacks, the module.
        extra = check_callbacks(module.configure_callbacks())
        replaced = {type(cb) for cb in extra}
        self.callbacks = [cb for cb in self._user_callbacks if type(cb) not in replaced] + extra
        check_unique_state_keys(self.callbacks)  # configure_callbacks may add a second one of a kind
        self._hooks = HookDispatcher(self, module, self.callbacks, profiler=active_profiler(self.profiler))
        if dm is not None or module_overrides(module, "prepare_data"):
            for owner in (dm, module):  # as Lightning: the data module's first, then the module's
                if owner is not None and _prepares_here(owner, strategy):
                    owner.prepare_data()
            strategy.barrier("prepare_data")
        if dm is not None:
            dm.setup(stage)
        self._hooks.call_callbacks("setup", stage)
        module.setup(stage)
        if stage == "fit":
            strategy.set_gradient_accumulation(self.accumulate_grad_batches)
        configure_model(module, strategy)  # every stage, as Lightning (the hook is to be idempotent)
        if self._setup_module is not module:
            sync_batchnorm(self._flags, module, strategy.world_size)
            strategy.setup(module)
            self._setup_module = module
            if self._optimizer_module is module:
                self._setup_optimizers(self.optimizers)
                _optimizers_to(self.optimizers, strategy.root_device)
        self._metrics.strategy = strategy
        strategy.add_abort_handler(self._flush_loggers)

    def _configure_optimizers(self) -> None:
        """``configure_optimizers`` at every ``fit``, as Lightning: a second fit starts with fresh optimizer states
        and schedulers sized for it. On resume it runs after the ``on_load_checkpoint`` hooks (a layer they rebuild
        is optimized)."""
        module = self.module
        self.optimizers, self.lr_scheduler_configs = parse_optimizers(module.configure_optimizers())
        self._setup_optimizers(self.optimizers)
        self._optimizer_module = module
        if len(self.optimizers) > 1 and module.automatic_optimization:
            raise ConfigError("configure_optimizers", f"{len(self.optimizers)} optimizers",
                              "automatic optimization steps one optimizer.",
                              fix="set self.automatic_optimization = False and step them in training_step.")

    def _setup_optimizers(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = self.strategy.setup_optimizers(optimizers)
        follow_replaced_optimizers(self.lr_scheduler_configs, optimizers, self.optimizers)

    def _setup_loggers(self) -> None:
        if self.is_global_zero:  # claims each new version_N before the ranks agree on it
            self._new_log_dirs = new_log_dirs(self.loggers)
        for logger in self.loggers:
            logger._version = self.strategy.broadcast(logger.version)
        if self.is_global_zero:  # as Lightning, at the start of every stage (a test-only run has them too)
            params = {**loggable_hparams(self.module), **loggable_hparams(self.datamodule)}
            for logger in self.loggers:
                if params:
                    logger.log_hyperparams(params)
                logger.log_graph(self.module)  # only a logger asked to (TensorBoardLogger(log_graph=True)) draws it

    def _nothing_to_run(self, configured: int | float | None) -> bool:
        """As Lightning: a validate/test/predict with no batch to run runs no hook (it returns ``[]``, predict
        ``None``); on one rank of several only when the limit says so (a rank whose shard is empty still joins the
        others' collectives)."""
        return not any(self._val_limits) and (self.strategy.world_size == 1 or configured == 0)

    def _run_stage(self, stage: Stage, *, resuming: bool) -> Any:
        trainer = cast("Trainer", self)
        self._metrics.new_results()  # as in Lightning: after test() they are the test's results
        if stage == "predict":
            if self._nothing_to_run(self.limit_predict_batches):
                return None
            return run_predict(trainer, self._eval_loaders, self._val_limits, keep=self._return_predictions)
        if stage in ("validate", "test"):
            if self._nothing_to_run(self.limit_val_batches if stage == "validate" else self.limit_test_batches):
                return []
            return results_per_dataloader(run_evaluation(trainer, stage, self._eval_loaders, self._val_limits),
                                          len(self._eval_loaders), self._metrics.key_dataloaders)
        warn_eval_modules(self.module)
        self._hooks.call("on_fit_start")
        if self._has_validation() and self.num_sanity_val_steps != 0 and not resuming:
            limits = self.num_sanity_val_batches
            # As Lightning's isolate_rng: the sanity check leaves the global generators as it found them, so its
            # draws (each val iterator's base seed, any randomness in validation_step) do not shift the training
            # shuffle, and a run with the sanity check trains on the batches a run without one does.
            rng = collect_rng_states()
            self.sanity_checking = True
            self._hooks.call_callbacks("on_sanity_check_start")
            trainer.strategy.before_fit_validation()
            run_evaluation(trainer, "sanity_check", self._eval_loaders, limits)
            self._hooks.call_callbacks("on_sanity_check_end")
            self.sanity_checking = False
            restore_rng_states(rng)
            self._metrics.new_results()
        self._val_clock = ValClock(self._flags.val_check_time) if self._flags.val_check_time else None
        with anomaly_detection(self._flags):
            FitLoop(trainer).run()
        self._hooks.call("on_fit_end")
        return None

    def _teardown(self, stage: Stage, status: str) -> None:
        error: BaseException | None = None
        if self.datamodule is not None:  # as Lightning: the data module's first, then the callbacks', the module's
            try:
                self.datamodule.teardown(stage)
            except Exception as err:  # noqa: BLE001 - the other teardowns still run; raised below as theirs are
                error = err
        hooks_error = self._hooks.call_all("teardown", stage)
        error = error or hooks_error
        shut_down_workers([self._train_loader, *self._eval_loaders])
        if self.is_global_zero:
            for logger in self.loggers:
                logger.finalize(status)
            if status != "success" and stage == "fit" and self.global_step == 0:
                remove_log_dirs(self._new_log_dirs)
            elif status == "success":
                remove_empty_log_dirs(self._new_log_dirs)
        self.strategy.teardown()
        self._metrics.batch = None
        if error is not None:
            if status == "success":  # as Lightning: a hook that fails to clean up fails the call
                raise error
            warnings.warn(f"a teardown hook raised {type(error).__name__}: {error} while {stage} was ending after "
                          f"an error (that error is raised).", UserWarning, stacklevel=2)


def _optimizers_to(optimizers: list[torch.optim.Optimizer], device: torch.device) -> None:
    """Move optimizer state to ``device`` (after a spawned run's state was loaded in the caller on CPU)."""
    for optimizer in optimizers:
        for state in optimizer.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor) and value.device != device and key != "step":
                    state[key] = value.to(device)


def _prepares_here(owner: Any, strategy: Strategy) -> bool:
    """Whether this process runs ``owner.prepare_data``: local rank 0 of each node, or global rank 0 alone when the
    owner sets ``prepare_data_per_node = False`` (Lightning's attribute)."""
    if strategy.local_rank != 0:
        return False
    return bool(getattr(owner, "prepare_data_per_node", True)) or strategy.global_rank == 0
