"""The Trainer: runs a TrainModule's fit, validate, test and predict on any accelerator, strategy and precision.

Hardware arguments are resolved by the one validator into a Strategy; from then on the Trainer, its loops and its
callbacks talk only to that Strategy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from xtrain.core._internal.auto_resume import Healing, WorldSizePolicy, check_auto, parse_healing
from xtrain.core._internal.best_checkpoint import default_ckpt_path
from xtrain.core._internal.callback_states import check_unique_state_keys
from xtrain.core._internal.checkpointing import build_checkpoint, find_checkpoint
from xtrain.core._internal.compiled import unwrap_compiled
from xtrain.core._internal.data import resumable_sampler
from xtrain.core._internal.hang import DEFAULT_HANG_TIMEOUT, parse_hang_timeout
from xtrain.core._internal.hooks import HookDispatcher
from xtrain.core._internal.loops.evaluation import run_evaluation
from xtrain.core._internal.metrics import MetricStore
from xtrain.core._internal.nonfinite import check_nonfinite_mode
from xtrain.core._internal.optim import SchedulerConfig
from xtrain.core._internal.optimizer import StrategyOptimizer
from xtrain.core._internal.preemption import Preemption
from xtrain.core._internal.profiling import resolve_profiler
from xtrain.core._internal.progress import FitProgress
from xtrain.core._internal.removed_hooks import check_removed_hooks, warn_uncalled_hooks
from xtrain.core._internal.resolve import resolve
from xtrain.core._internal.rng import restore_rng_states
from xtrain.core._internal.run_flags import ValClock, apply_torch_flags
from xtrain.core._internal.run_lock import RunLock
from xtrain.core._internal.sampler import ResumableSampler
from xtrain.core._internal.stage_steps import check_stage_step
from xtrain.core._internal.trainer_args import (
    barebones_settings,
    check_callbacks,
    check_loggers,
    check_progress_bars,
    check_root,
    check_switches,
    none_as_default,
    parse_run_flags,
    parse_settings,
    warn_minimum_over_maximum,
)
from xtrain.core._internal.trainer_compat import LightningAttributes
from xtrain.core._internal.trainer_data import StageLoaders
from xtrain.core._internal.trainer_run import RunLifecycle, Stage
from xtrain.core._internal.trainer_services import LoopServices
from xtrain.core._internal.writable import check_output_dirs
from xtrain.core.accelerator import Accelerator
from xtrain.core.callbacks import Callback, ModelCheckpoint, ModelSummary, ProgressBar, default_progress_bar
from xtrain.core.checkpoint_io import CheckpointIO
from xtrain.core.datamodule import DataModule
from xtrain.core.environment import ClusterEnvironment
from xtrain.core.errors import ConfigError
from xtrain.core.loggers.logger import Logger
from xtrain.core.module import TrainModule
from xtrain.core.precision import Precision
from xtrain.core.profilers.profiler import Profiler
from xtrain.core.strategy import Strategy

if TYPE_CHECKING:
    from xtrain.core._internal.fit_loop_view import FitLoopView

__all__ = ["Trainer"]

PluginArg = Precision | CheckpointIO | ClusterEnvironment | str


# The private run lifecycle, stage loaders and loop services are mixins in _internal/trainer_{run,data,services}.py.
class Trainer(RunLifecycle, StageLoaders, LoopServices, LightningAttributes):
    """Trains and evaluates a :class:`~xtrain.core.TrainModule`.

    Hardware (all resolved before anything starts; any invalid value raises
    :class:`~xtrain.core.errors.ConfigError`):

    Args:
        accelerator: ``"auto"``, a registered name (``"cpu"``, ``"cuda"``, ...) or an Accelerator.
        devices: ``"auto"``, a count, ``-1`` (all), a list of indices or a string like ``"0,1"``. ``"auto"`` is
            the accelerator's choice (1 on the CPU, every GPU), or under torchrun, mpirun or horovodrun the number of
            processes the launcher started on the node.
        num_nodes: Number of machines.
        strategy: ``"auto"``, a registered name (``"ddp"``, ``"fsdp"``, ...) or a Strategy.
        precision: A registered precision name (``"32-true"``, ``"bf16-mixed"``, ...) or a legacy spelling.
        plugins: A Precision, CheckpointIO or ClusterEnvironment instance or name, or a list of them.

    Lightning's ``None`` for the ``enable_*`` switches, ``limit_*_batches``, ``val_check_interval``,
    ``gradient_clip_algorithm``, ``num_sanity_val_steps`` and ``log_every_n_steps`` means their default here too
    (a Lightning ``config.yaml`` writes them so).

    Length and cadence:

    Args:
        max_epochs: Stop after this many epochs (default 1000 when ``max_steps`` is unset; -1 for no limit).
        max_steps: Stop after this many optimizer steps (-1: no limit).
        max_time: Stop after this long (``"DD:HH:MM:SS"``, timedelta or dict).
        limit_train_batches: Training batches per epoch (int) or fraction of the dataloader (float).
        limit_val_batches: Likewise for validation.
        limit_test_batches: Likewise for testing.
        limit_predict_batches: Likewise for prediction.
        val_check_interval: Validate every fraction of an epoch (float), every N batches (int), or every so much
            wall-clock time (a timedelta, ``"DD:HH:MM:SS"`` or a dict of timedelta arguments).
        check_val_every_n_epoch: Validate every N epochs (``None``: by ``val_check_interval`` batches only).
        num_sanity_val_steps: Validation batches run before training to catch bugs early (-1: all).
        accumulate_grad_batches: Batches whose gradients are summed before each optimizer step.
        gradient_clip_val: Clip gradients to this norm or value (``None``: no clipping).
        gradient_clip_algorithm: ``"norm"`` or ``"value"``.
        fast_dev_run: Run 1 (or N) batches of each stage, with no checkpoints or logs, to test the code.
        overfit_batches: Train and validate on the same first N batches (or fraction) every epoch, unshuffled.
        min_epochs: Early stopping cannot end training before this many epochs.
        min_steps: Early stopping cannot end training before this many optimizer steps.
        reload_dataloaders_every_n_epochs: Request the dataloaders again every N epochs (0: never).

    Everything else:

    Args:
        deterministic: Make torch use deterministic algorithms (``"warn"``: only warn about nondeterministic ones;
            ``False`` turns the mode off; ``None`` leaves it as it is). Set for the whole process, as in Lightning.
        callbacks: Callbacks to run.
        logger: ``True`` (TensorBoard if installed, else CSV), ``False``, a Logger or a list of them.
        enable_checkpointing: Add a ModelCheckpoint (saving ``last.ckpt``) when none is given.
        enable_progress_bar: Add a progress bar when none is given.
        enable_model_summary: Print a table of the model when fitting starts.
        log_every_n_steps: How often step metrics reach the loggers.
        default_root_dir: Where logs and checkpoints go by default (the working directory).
        use_distributed_sampler: Shard dataloaders across ranks automatically.
        sync_batchnorm: Synchronize BatchNorm statistics across processes (converts to ``SyncBatchNorm``).
        detect_anomaly: Train under ``torch.autograd.set_detect_anomaly`` (slow; finds the op that made a NaN).
        benchmark: Set ``torch.backends.cudnn.benchmark`` (``None``: leave it as it is, or off with
            ``deterministic``).
        barebones: Turn off everything that costs speed: loggers, checkpointing, progress bar, model summary and
            the sanity check.
        inference_mode: Evaluate under ``torch.inference_mode`` (``False``: ``torch.no_grad``; accelerators that
            declare ``supports_inference_mode = False``, such as XLA, always use ``torch.no_grad``). Validation
            inside ``fit`` always runs under ``torch.no_grad``, as Lightning's, so values it keeps can train.
        hang_timeout: Seconds (or a timedelta) a rank may make no progress before the run is reported as hung
            (every rank's stacks and a summary) and ended; the first step of each loop gets 4 times as long.
            Default 15 minutes; ``None`` turns it off. Multi-process strategies only; see the distributed guide.
        on_nonfinite_loss: A NaN/inf training loss: ``"warn"`` (checked every ``log_every_n_steps`` without a
            per-step sync), ``"raise"`` (stop before its backward) or ``"skip"`` (skip that step on every rank;
            both read the loss every step). See the "Non-finite losses" guide.
        profiler: ``"simple"``, ``"advanced"``, ``"pytorch"`` or a Profiler: time hooks and steps, report at the
            end of each stage (``None``: nothing is timed and nothing is wrapped; ``trainer.profiler`` is then a
            ``PassThroughProfiler``, so ``with self.trainer.profiler.profile("x"):`` in a module still works).
        run_name: This run's identity for ``fit(ckpt_path="auto")`` and its log directory (default: the
            launcher's restart group, torchrun's run id or SLURM's job id). See the "Long jobs" guide.
        max_restarts: Restart the whole group this many times after a rank fails (xtrain's launcher).
        on_world_size_change: A resume with another number of ranks keeps the per-rank batch
            (``"keep_per_rank_batch"``) or the global batch through gradient accumulation (``"keep_global_batch"``).
    """

    def __init__(
        self, *, accelerator: str | Accelerator = "auto", strategy: str | Strategy = "auto",
        devices: int | str | list[int] = "auto", num_nodes: int = 1, precision: str | int | Precision | None = None,
        plugins: PluginArg | list[PluginArg] | None = None, max_epochs: int | None = None, max_steps: int = -1,
        max_time: str | timedelta | dict[str, int] | None = None, limit_train_batches: int | float | None = 1.0,
        limit_val_batches: int | float | None = 1.0, limit_test_batches: int | float | None = 1.0,
        limit_predict_batches: int | float | None = 1.0,
        val_check_interval: int | float | str | timedelta | dict[str, int] | None = 1.0,
        check_val_every_n_epoch: int | None = 1,
        num_sanity_val_steps: int | None = 2, accumulate_grad_batches: int = 1, gradient_clip_val: float | None = None,
        gradient_clip_algorithm: Literal["norm", "value"] | None = "norm",
        deterministic: bool | Literal["warn"] | None = None,
        callbacks: Callback | Sequence[Callback] | None = None,
        logger: bool | Logger | Sequence[Logger] | None = True,
        enable_checkpointing: bool | None = True, enable_progress_bar: bool | None = True,
        enable_model_summary: bool | None = True,
        log_every_n_steps: int | None = 50, default_root_dir: str | Path | None = None, fast_dev_run: bool | int = False,
        use_distributed_sampler: bool = True, inference_mode: bool = True,
        hang_timeout: float | timedelta | None = DEFAULT_HANG_TIMEOUT, overfit_batches: int | float = 0.0,
        min_epochs: int | None = None, min_steps: int | None = None, reload_dataloaders_every_n_epochs: int = 0,
        sync_batchnorm: bool = False, detect_anomaly: bool = False, benchmark: bool | None = None,
        barebones: bool = False,
        on_nonfinite_loss: Literal["warn", "raise", "skip"] = "warn", profiler: str | Profiler | None = None,
        run_name: str | None = None, max_restarts: int = 0,
        on_world_size_change: WorldSizePolicy = "keep_per_rank_batch",
    ) -> None:
        (enable_checkpointing, enable_progress_bar, enable_model_summary, val_check_interval, gradient_clip_algorithm,
         limit_train_batches, limit_val_batches, limit_test_batches, limit_predict_batches, num_sanity_val_steps,
         log_every_n_steps) = none_as_default(
            enable_checkpointing=enable_checkpointing, enable_progress_bar=enable_progress_bar,
            enable_model_summary=enable_model_summary, val_check_interval=val_check_interval,
            gradient_clip_algorithm=gradient_clip_algorithm, limit_train_batches=limit_train_batches,
            limit_val_batches=limit_val_batches, limit_test_batches=limit_test_batches,
            limit_predict_batches=limit_predict_batches, num_sanity_val_steps=num_sanity_val_steps,
            log_every_n_steps=log_every_n_steps).values()
        self._run_lock = RunLock()
        self._healing: Healing = parse_healing(run_name=run_name, max_restarts=max_restarts,
                                               on_world_size_change=on_world_size_change)
        self._flags = flags = parse_run_flags(
            overfit_batches=overfit_batches, min_epochs=min_epochs, min_steps=min_steps,
            reload_dataloaders_every_n_epochs=reload_dataloaders_every_n_epochs, sync_batchnorm=sync_batchnorm,
            detect_anomaly=detect_anomaly, benchmark=benchmark, barebones=barebones,
            val_check_interval=val_check_interval)
        check_switches(enable_checkpointing=enable_checkpointing, enable_progress_bar=enable_progress_bar,
                       enable_model_summary=enable_model_summary, use_distributed_sampler=use_distributed_sampler,
                       inference_mode=inference_mode)
        if flags.barebones:
            logger, enable_checkpointing, enable_progress_bar, enable_model_summary, num_sanity_val_steps = \
                barebones_settings(logger=logger, callbacks=check_callbacks(callbacks)).values()
        if flags.val_check_time is not None:
            val_check_interval = 1.0  # validation then follows the clock (run_flags.ValClock), not the batches
        if flags.overfit_batches:
            limit_train_batches = limit_val_batches = flags.overfit_batches
        limits = parse_settings(
            max_epochs=max_epochs, max_steps=max_steps, max_time=max_time, limit_train_batches=limit_train_batches,
            limit_val_batches=limit_val_batches, limit_test_batches=limit_test_batches,
            limit_predict_batches=limit_predict_batches, val_check_interval=val_check_interval,
            check_val_every_n_epoch=check_val_every_n_epoch, num_sanity_val_steps=num_sanity_val_steps,
            accumulate_grad_batches=accumulate_grad_batches, gradient_clip_val=gradient_clip_val,
            gradient_clip_algorithm=gradient_clip_algorithm, log_every_n_steps=log_every_n_steps,
            fast_dev_run=fast_dev_run)
        warn_minimum_over_maximum(limits, flags)
        if deterministic not in (True, False, "warn", None):
            raise ConfigError("deterministic", deterministic, "is not a valid setting.",
                              choices=[True, False, "warn", None], fix="write deterministic=True.")
        self.max_epochs, self.max_steps, self.max_time = limits.max_epochs, limits.max_steps, limits.max_time
        self.limit_train_batches, self.limit_val_batches = limits.limit_train_batches, limits.limit_val_batches
        self.limit_test_batches, self.limit_predict_batches = limits.limit_test_batches, limits.limit_predict_batches
        self.val_check_interval, self.check_val_every_n_epoch = limits.val_check_interval, limits.check_val_every_n_epoch
        self.num_sanity_val_steps, self.accumulate_grad_batches = limits.num_sanity_val_steps, limits.accumulate_grad_batches
        self.gradient_clip_val, self.gradient_clip_algorithm = limits.gradient_clip_val, limits.gradient_clip_algorithm
        self.log_every_n_steps, self.fast_dev_run = limits.log_every_n_steps, limits.fast_dev_run
        self.default_root_dir = check_root(default_root_dir)
        self.profiler = resolve_profiler(profiler)
        user_callbacks = check_callbacks(callbacks)
        check_progress_bars(user_callbacks)
        check_unique_state_keys(user_callbacks)
        self.loggers: list[Logger] = [] if limits.fast_dev_run else check_loggers(logger, self.default_root_dir)
        self.strategy: Strategy = resolve(accelerator=accelerator, devices=devices, num_nodes=num_nodes,
                                          strategy=strategy, precision=precision, plugins=plugins).strategy
        self.strategy.set_hang_timeout(parse_hang_timeout(hang_timeout))
        apply_torch_flags(flags, deterministic)
        self._val_clock: ValClock | None = None
        defaults: list[Callback] = []
        if enable_checkpointing and not limits.fast_dev_run and not any(
                isinstance(cb, ModelCheckpoint) for cb in user_callbacks):
            defaults.append(ModelCheckpoint(save_last=True))
        if enable_progress_bar and not any(isinstance(cb, ProgressBar) for cb in user_callbacks):
            defaults.append(default_progress_bar())
        if enable_model_summary and not limits.fast_dev_run and not any(
                isinstance(cb, ModelSummary) for cb in user_callbacks):
            defaults.append(ModelSummary())
        self._user_callbacks = user_callbacks + defaults
        self.callbacks: list[Callback] = list(self._user_callbacks)
        self.use_distributed_sampler = use_distributed_sampler
        self.inference_mode = inference_mode
        self.on_nonfinite_loss = check_nonfinite_mode(on_nonfinite_loss)
        self.should_stop = False
        self.skip_optimizer_step = False  # set in on_before_optimizer_step to drop that step's gradients
        self.sanity_checking = False
        self.is_last_batch = False  # during a training batch: whether it is the epoch's last (Lightning's name)
        self.state: Stage | None = None
        self._progress = FitProgress()
        self._metrics = MetricStore()
        self._preemption = Preemption()
        self._module: TrainModule | None = None
        self.datamodule: DataModule | None = None
        self.optimizers: list[torch.optim.Optimizer] = []
        self._wrapped_optimizers: list[StrategyOptimizer] = []
        self.lr_scheduler_configs: list[SchedulerConfig] = []
        self._schedulers_resumed = False
        self._step_log_due = False  # a row is due for the loggers after the batch's end hooks
        self._loaders: dict[str, Any] = {}
        self._train_loader: Any = None  # what the fit loop iterates (its sampler made resumable)
        self._eval_loaders: list[Any] = []  # the current evaluation stage's loaders, as its loop runs them
        self._return_predictions = True
        self._shown_loaders: dict[str, Any] = {}
        self.num_training_batches: float = math.inf
        self._val_limits: list[float] = []
        self._ckpt_path: str | Path | None = None
        self._ckpt_requested: str | Path | None = None
        self._ckpt_problem: ConfigError | None = None
        self._val_last_batch = (-1, -1)  # (epoch, batches_in_epoch) of the latest validation during fit
        self._pending_rng: dict[str, Any] | None = None
        self._label_lag = 0
        self._pending_logged: dict[str, Any] | None = None  # a checkpoint's logged values, put back by the fit loop
        self._pending_sampler: dict[str, Any] | None = None
        self._setup_module: TrainModule | None = None
        self._optimizer_module: TrainModule | None = None
        self._hooks = HookDispatcher(self, TrainModule(), [])

    # -- properties --------------------------------------------------------------------------------------------
    @property
    def module(self) -> TrainModule:
        if self._module is None:
            raise RuntimeError("the Trainer has no module yet; pass one to fit/validate/test/predict.")
        return self._module

    @property
    def global_rank(self) -> int:
        return self.strategy.global_rank

    @property
    def local_rank(self) -> int:
        return self.strategy.local_rank

    @property
    def world_size(self) -> int:
        return self.strategy.world_size

    @property
    def is_global_zero(self) -> bool:
        return self.strategy.is_global_zero

    @property
    def current_epoch(self) -> int:
        return self._progress.epoch

    @property
    def global_step(self) -> int:
        return self._progress.global_step

    @property
    def estimated_stepping_batches(self) -> int | float:
        """The optimizer steps this fit will take (``max_steps``, or batches per epoch times epochs over accumulation)."""
        from xtrain.core._internal.estimates import estimated_stepping_batches

        return estimated_stepping_batches(self)

    @property
    def fit_loop(self) -> FitLoopView:
        """What Lightning scripts read of ``trainer.fit_loop`` (``setup_data()``, ``max_epochs``, batch counts)."""
        from xtrain.core._internal.fit_loop_view import FitLoopView

        return FitLoopView(self, self._progress, lambda: self._setup_dataloaders("fit"))

    @property
    def logger(self) -> Logger | None:
        return self.loggers[0] if self.loggers else None

    @property
    def received_sigterm(self) -> bool:
        """Whether the last ``fit`` was stopped by SIGTERM (or SLURM's SIGUSR1 warning) and raised
        ``SIGTERMException``; every rank of the run says so, whichever rank was signalled."""
        return self._preemption.received_sigterm

    @property
    def log_dir(self) -> str:
        """The first logger's ``log_dir`` (``default_root_dir`` without a logger), as a ``str``.

        Lightning returns a ``str`` and scripts build paths with ``trainer.log_dir + "/x"``; xtrain's own code wraps
        it in ``Path``.
        """
        return str(self.loggers[0].log_dir if self.loggers else self.default_root_dir)

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        return self._metrics.callback_metrics

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        """What went to the loggers, as scalar tensors (Lightning's type: ``.item()`` works on each)."""
        return {key: torch.tensor(value) for key, value in self._metrics.logged().items()}

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        return self._metrics.progress_bar_metrics()

    @property
    def checkpoint_callbacks(self) -> list[ModelCheckpoint]:
        return [cb for cb in self.callbacks if isinstance(cb, ModelCheckpoint)]

    @property
    def checkpoint_callback(self) -> ModelCheckpoint | None:
        return next(iter(self.checkpoint_callbacks), None)

    @property
    def _train_sampler(self) -> ResumableSampler | None:
        return resumable_sampler(self._train_loader)

    # -- entry points ------------------------------------------------------------------------------------------
    def fit(self, model: TrainModule, train_dataloaders: Any = None, val_dataloaders: Any = None, *,
            datamodule: DataModule | None = None, ckpt_path: str | Path | None = None) -> None:
        """Train ``model``; with ``ckpt_path`` (``"last"``, ``"best"`` or a path) resume exactly where it stopped.

        ``ckpt_path="auto"`` resumes this run (``run_name``) from its newest complete checkpoint, or starts fresh.
        """
        self._attach(model, datamodule, train=train_dataloaders, val=val_dataloaders)
        self._launch("fit", ckpt_path)

    def validate(self, model: TrainModule | None = None, dataloaders: Any = None, ckpt_path: str | Path | None = None,
                 verbose: bool = True, datamodule: DataModule | None = None) -> list[dict[str, float]]:
        """Run validation once; returns the logged epoch metrics (``verbose``: print them as a table on rank 0)."""
        self._attach(model if model is not None else self.module, datamodule, val=dataloaders)
        return self._evaluate("validate", default_ckpt_path(self, model, ckpt_path), verbose)

    def test(self, model: TrainModule | None = None, dataloaders: Any = None, ckpt_path: str | Path | None = None,
             verbose: bool = True, datamodule: DataModule | None = None) -> list[dict[str, float]]:
        """Run the test set once; returns the logged epoch metrics (``verbose``: print them as a table on rank 0)."""
        self._attach(model if model is not None else self.module, datamodule, test=dataloaders)
        return self._evaluate("test", default_ckpt_path(self, model, ckpt_path), verbose)

    def _evaluate(self, stage: Literal["validate", "test"], ckpt_path: str | Path | None,
                  verbose: bool) -> list[dict[str, float]]:
        results: list[dict[str, float]] = self._launch(stage, ckpt_path)
        if verbose and self.is_global_zero:
            from xtrain.core._internal.results_table import print_results

            print_results(results, stage)
        return results

    def predict(self, model: TrainModule | None = None, dataloaders: Any = None, *,
                datamodule: DataModule | None = None, return_predictions: bool | None = None,
                ckpt_path: str | Path | None = None) -> list[Any] | None:
        """Return ``predict_step`` outputs (a list per dataloader when there are several).

        Args:
            return_predictions: ``False`` keeps none of them in memory and returns ``None`` (with a
                ``BasePredictionWriter`` writing them as they come); ``None`` or ``True`` returns them.
        """
        self._attach(model if model is not None else self.module, datamodule, predict=dataloaders)
        self._return_predictions = return_predictions is not False
        outputs: list[list[Any]] | None = self._launch("predict", default_ckpt_path(self, model, ckpt_path))
        if not self._return_predictions or outputs is None:  # None: no batch to predict (limit_predict_batches=0)
            return None
        return outputs[0] if len(outputs) == 1 else outputs

    def init_module(self) -> AbstractContextManager[Any]:
        """Create your module inside ``with trainer.init_module():``.

        Under ``-true`` precisions its parameters are created directly in the training dtype (a bf16 model never
        exists in float32 first); strategies may add more (e.g. creating it on the right device).
        """
        return self.strategy.module_init_context()

    def save_checkpoint(self, filepath: str | Path, weights_only: bool = False, storage_options: Any = None) -> None:
        """Write a checkpoint of the current run to ``filepath``. Every rank must call it.

        Lightning's signature; ``storage_options`` (for a custom ``CheckpointIO``) must stay ``None``: xtrain's
        checkpoint IO takes none.
        """
        if storage_options is not None:
            raise ConfigError("storage_options", storage_options, "is not taken by xtrain's checkpoint IO.",
                              fix="remove it; to write elsewhere (object storage), pass a CheckpointIO plugin to "
                                  "the Trainer's plugins=[...].")
        self._save_checkpoint_to([Path(filepath)], weights_only=weights_only)

    # -- launching ---------------------------------------------------------------------------------------------
    def _attach(self, model: Any, datamodule: DataModule | None, **loaders: Any) -> None:
        model = unwrap_compiled(model)
        for key, value in loaders.items():  # fit(model, datamodule): a DataModule in the dataloaders' place
            if isinstance(value, DataModule) and datamodule is None:
                datamodule, loaders[key] = value, None
        if not isinstance(model, TrainModule):
            raise ConfigError("model", type(model).__name__, "is not a TrainModule.",
                              fix="subclass xtrain.core.TrainModule and pass an instance.")
        if datamodule is not None and not isinstance(datamodule, DataModule):
            raise ConfigError("datamodule", type(datamodule).__name__, "is not a DataModule.",
                              fix="subclass xtrain.core.DataModule, or pass dataloaders directly.")
        if datamodule is not None and any(v is not None for v in loaders.values()):
            raise ConfigError("datamodule", type(datamodule).__name__, "was passed together with dataloaders.",
                              fix="pass either a datamodule or dataloaders, not both.")
        if not model.automatic_optimization and (self.gradient_clip_val or self.accumulate_grad_batches > 1):
            raise ConfigError("gradient_clip_val" if self.gradient_clip_val else "accumulate_grad_batches",
                              self.gradient_clip_val or self.accumulate_grad_batches,
                              "is done by your training_step under manual optimization (automatic_optimization=False).",
                              fix="leave it at its default and clip/accumulate in training_step.")
        check_removed_hooks(model, self._user_callbacks)
        warn_uncalled_hooks(model)
        self._module = model
        model._trainer = self
        self.datamodule = datamodule if datamodule is not None else self.datamodule
        if self.datamodule is not None:
            self.datamodule.trainer = self
        self._loaders.update({k: v for k, v in loaders.items() if v is not None})

    def _launch(self, stage: Stage, ckpt_path: str | Path | None) -> Any:
        # Resolved here, before any process starts, so a bad ckpt_path is a ConfigError in the caller alone.
        check_stage_step(self.module, stage)
        check_output_dirs(self, fitting=stage == "fit")
        launcher = self.strategy.launcher
        check_auto(self, self._healing, stage, ckpt_path, launcher)
        self._ckpt_requested, self._ckpt_problem = ckpt_path, None
        try:
            path = find_checkpoint(self, ckpt_path) if ckpt_path not in (None, "auto") else ckpt_path
        except ConfigError as error:
            if self.num_nodes == 1:
                raise
            # Another node's disk may hold it: every rank reports what it found once all have joined (an error
            # here would leave the other nodes waiting for this one at the rendezvous).
            path, self._ckpt_problem = None, error
        if launcher is None:
            return self._run(stage, path, False)
        result = launcher.launch(self._run, stage, path, not launcher.runs_in_caller)
        if launcher.runs_in_caller or result is None:
            return result
        from xtrain.core._internal.spawn import receive_worker_result

        return receive_worker_result(self, result)

    # -- services for loops and callbacks ----------------------------------------------------------------------
    def _has_validation(self) -> bool:
        return bool(self._eval_loaders) and any(lim > 0 for lim in self._val_limits)

    def _validates_this_epoch(self) -> bool:
        """Whether the current epoch is one ``check_val_every_n_epoch`` validates in."""
        every = self.check_val_every_n_epoch
        return every is None or (self._progress.epoch + 1) % every == 0

    def _val_due(self, batches_done: int, last: bool) -> bool:
        if not self._has_validation() or self.state != "fit":
            return False
        if self._val_clock is not None:
            return self._val_clock.due(self.strategy)
        if not self._validates_this_epoch():
            return False
        every = self.check_val_every_n_epoch
        interval = self.val_check_interval
        if isinstance(interval, float):
            if interval == 1.0 or not math.isfinite(self.num_training_batches):
                return last
            return batches_done % self.val_check_batch == 0
        count = batches_done if every is not None else self._progress.total_batches
        return count % interval == 0

    def _run_validation(self) -> None:
        self._val_last_batch = (self._progress.epoch, self._progress.batches_in_epoch)
        if self._val_clock is not None:
            self._val_clock.reset()
        self.strategy.before_fit_validation()
        run_evaluation(self, "validate", self._eval_loaders, self._val_limits)

    def _after_optimizer_step(self, stepped: bool = True, log_count: int | None = None) -> None:
        """``log_count``: the count that paces logging (default ``global_step``)."""
        if stepped and self.lr_scheduler_configs:
            self._step_schedulers("step", plateau=False)  # a plateau one after the batch's validation (fit loop)
        count = self.global_step if log_count is None else log_count
        self._label_lag = 1
        if self.loggers and count % self.log_every_n_steps == 0:
            self._step_log_due = True

    def _strategy_optimizers(self) -> list[StrategyOptimizer]:
        if [w.optimizer for w in self._wrapped_optimizers] != self.optimizers:
            self._wrapped_optimizers = [StrategyOptimizer(opt, self.strategy, on_step=self._manual_step_taken,
                                                          before_step=self._manual_before_step,
                                                          toggled=self.module.toggled_optimizer)
                                        for opt in self.optimizers]
        return self._wrapped_optimizers

    def _manual_before_step(self, optimizer: torch.optim.Optimizer) -> bool:
        """``opt.step()`` under manual optimization calls ``on_before_optimizer_step``, as Lightning's does."""
        for fn in self._hooks.get("on_before_optimizer_step"):
            fn(optimizer)
        return True

    def _manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``manual_backward``: the backward pass between ``on_before_backward`` and ``on_after_backward``."""
        hooks = self._hooks
        for fn in hooks.get("on_before_backward"):
            fn(loss)
        self.strategy.backward(loss, *args, **kwargs)
        for fn in hooks.get("on_after_backward"):
            fn()

    def _manual_step_taken(self) -> None:
        """Under manual optimization ``global_step`` counts each ``opt.step()`` as it happens, as in Lightning (a
        ``training_step`` reading ``self.global_step`` between two optimizers' steps sees the first counted)."""
        if not self.module.automatic_optimization:
            self._progress.global_step += 1

    def _restore_pending_rng(self) -> None:
        if self._pending_rng is not None:
            restore_rng_states(self._pending_rng)
            self._pending_rng = None

    def _check_preemption(self) -> None:
        if self._preemption.agreed(self.strategy):
            self._preemption.save_and_stop(self)

    def _save_checkpoint_to(self, paths: Iterable[Path], *, weights_only: bool, wait: bool = True) -> None:
        """Save to every path; ``wait=False`` returns before the files are synced and in place (routine saves)."""
        checkpoint = build_checkpoint(self, weights_only=weights_only)
        self._hooks.call("on_save_checkpoint", checkpoint)
        first, *rest = paths
        self.strategy.save_checkpoint(checkpoint, first)
        for path in rest:
            self.strategy.copy_checkpoint(first, path)
        if wait:
            self.strategy.checkpoint_io.settle()
        self.strategy.barrier("save_checkpoint")
