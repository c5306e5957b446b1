"""Saving checkpoints during training: every N epochs or steps, the best K by a monitored metric, and ``last``."""

from __future__ import annotations

import math
import os
import re
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from typing_extensions import override

from xtrain.core._internal.checkpoint_names import DEFAULT_FILENAME, FIELD, name_pattern
from xtrain.core.callbacks.callback import Callback
from xtrain.core.errors import ConfigError, format_choices
from xtrain.core.loggers.logger import Logger

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["ModelCheckpoint"]


def _absolute(dirpath: str | Path | None) -> Path | None:
    """A given directory made absolute (``~`` expanded, links resolved) as Lightning does, so ``best_model_path`` and
    the other paths stay valid after the script changes its working directory."""
    return Path(os.path.realpath(os.path.expanduser(dirpath))) if dirpath is not None else None


class ModelCheckpoint(Callback):
    """Saves checkpoints at save points (after an optimizer step, or after an epoch has fully ended).

    Args:
        dirpath: Directory of the checkpoints (default: ``<log_dir>/checkpoints``, or
            ``<default_root_dir>/checkpoints`` without a logger).
        filename: Template such as ``"{epoch}-{val_loss:.3f}"``; fields become ``epoch=3-val_loss=0.123``.
        monitor: Metric to rank checkpoints by (``None``: keep the most recent ones).
        mode: Whether lower (``"min"``) or higher (``"max"``) values of ``monitor`` are better.
        save_top_k: How many checkpoints to keep (``-1``: all, ``0``: none but ``last``).
        save_last: Also write ``last.ckpt`` at every save, for ``ckpt_path="last"``. It shares the newest saved
            file's bytes through a hard link (a copy where links are unsupported), so ``"link"`` (Lightning's
            symbolic link) is accepted and does the same; ``last_model_path`` and ``best_model_path`` name the files.
        every_n_epochs: Save after every N completed epochs (default 1 unless ``every_n_train_steps`` or
            ``train_time_interval`` is set, as in Lightning).
        every_n_train_steps: Save after every N optimizer steps (mid-epoch resume points).
        save_weights_only: Store only the module's weights.
        verbose: Print a line for every checkpoint saved (on rank 0).
        auto_insert_metric_name: Write template fields as ``name=value`` (``False``: the value alone, for names
            with ``/`` or your own separators).
        save_on_train_epoch_end: ``True`` saves at the end of training epochs; ``False`` saves right after each
            validation instead (mid-epoch ones included), so a monitored validation metric is ranked when it is
            fresh. ``None`` decides as Lightning: after validations when ``check_val_every_n_epoch != 1`` or
            ``val_check_interval != 1.0``, at epoch ends otherwise (and when there is no validation).
        train_time_interval: Also save every this much wall-clock time (checked after optimizer steps; rank 0's
            clock decides for all ranks).
        enable_version_counter: Write ``name-v1.ckpt`` (``-v2``...) instead of overwriting an existing file that
            this callback did not write.
        max_overhead: Skip a save point of the schedule while the time since the last save is shorter than the last
            save took divided by this fraction (``0.01``: saving takes at most about 1% of the run), and never
            longer than :attr:`MAX_OVERHEAD_WAIT` seconds; a skipped save is made up when training ends, so the
            run's final files are the same. For short epochs of a large model, where a save each epoch costs more
            than the epoch's work is worth. ``None`` (the default, as Lightning) saves at every save point.
    """

    runs_last: ClassVar[bool] = True
    FILE_EXTENSION: ClassVar[str] = ".ckpt"
    CHECKPOINT_NAME_LAST: ClassVar[str] = "last"  # Lightning's attribute: set it on the class or an instance
    MAX_OVERHEAD_WAIT: ClassVar[float] = 60.0

    def __init__(self, dirpath: str | Path | None = None, filename: str | None = None, *, monitor: str | None = None,
                 mode: Literal["min", "max"] = "min", save_top_k: int = 1,
                 save_last: bool | Literal["link"] | None = False,
                 every_n_epochs: int | None = None, every_n_train_steps: int | None = None,
                 save_weights_only: bool = False, verbose: bool = False, auto_insert_metric_name: bool = True,
                 save_on_train_epoch_end: bool | None = None, train_time_interval: timedelta | None = None,
                 enable_version_counter: bool = True, max_overhead: float | None = None) -> None:
        if mode not in ("min", "max"):
            raise ConfigError("mode", mode, "is not a ModelCheckpoint mode.", choices=["min", "max"],
                              fix="write mode='min' when lower is better.")
        if save_last not in (True, False, None, "link") or not isinstance(save_last, (bool, str, type(None))):
            raise ConfigError("save_last", save_last, "is not a save_last setting.", choices=[True, False, "link"],
                              fix="write save_last=True to keep a last.ckpt beside the top-k files.")
        if not isinstance(save_top_k, int) or save_top_k < -1:
            raise ConfigError("save_top_k", save_top_k, "must be an int >= -1.", fix="write save_top_k=1.")
        for name, value in (("every_n_epochs", every_n_epochs), ("every_n_train_steps", every_n_train_steps)):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ConfigError(name, value, "must be a non-negative int.", fix=f"write {name}=1.")
        if train_time_interval is not None and not isinstance(train_time_interval, timedelta):
            raise ConfigError("train_time_interval", train_time_interval, "must be a datetime.timedelta.",
                              fix="write train_time_interval=timedelta(minutes=30).")
        if max_overhead is not None and (isinstance(max_overhead, bool) or not isinstance(max_overhead, (int, float))
                                         or not 0 < max_overhead <= 1):
            raise ConfigError("max_overhead", max_overhead, "must be a fraction in (0, 1], or None.",
                              fix="write max_overhead=0.01 (saving takes about 1% of the run), or None to save at "
                                  "every save point.")
        self.max_overhead = max_overhead
        self._save_seconds: float | None = None  # how long the latest save held the training loop
        self._skipped_epoch: int | None = None  # the epoch of a save point skipped since the latest save
        self.verbose = verbose
        self.auto_insert_metric_name = auto_insert_metric_name
        self.save_on_train_epoch_end = save_on_train_epoch_end
        self.train_time_interval = train_time_interval
        self.enable_version_counter = enable_version_counter
        self._last_time = time.monotonic()
        self._validated_step = -1
        self._deferred = False  # a step save point passed before the monitored key existed: save after validation
        self._pre_validation: tuple[int, dict[str, Any]] | None = None  # the metrics as a validation started
        self._dirpath = _absolute(dirpath)
        self._run_dirpath: Path | None = None
        self.filename = filename
        self.monitor = monitor
        self.mode = mode
        self.save_top_k = save_top_k
        self.save_last = save_last
        self.every_n_train_steps = every_n_train_steps or 0
        self.every_n_epochs = every_n_epochs if every_n_epochs is not None else \
            (0 if self.every_n_train_steps or train_time_interval is not None else 1)
        self.save_weights_only = save_weights_only
        self.best_k_models: dict[str, float] = {}
        self._recent: dict[str, float] = {}  # without monitor: the kept files by step (best_k_models stays empty)
        self.best_model_path = ""
        self._best_score: float | None = None
        self._current_score: float | None = None  # the monitored value at the latest save
        self.last_model_path = ""
        self._saved_step = -1
        self._unchecked = False  # a restored state not yet checked against the run's directory

    @property
    def best_model_score(self) -> torch.Tensor | None:
        """The monitored value of ``best_model_path``, a 0-d tensor as in Lightning (``.item()`` gives the float)."""
        return None if self._best_score is None else torch.tensor(self._best_score)

    @best_model_score.setter
    def best_model_score(self, value: torch.Tensor | float | None) -> None:
        self._best_score = None if value is None else float(value)

    @property
    def current_score(self) -> torch.Tensor | None:
        """The monitored value at the latest save (``None`` without ``monitor``), a 0-d tensor as in Lightning."""
        return None if self._current_score is None else torch.tensor(self._current_score)

    @property
    def kth_best_model_path(self) -> str:
        """The path of the worst of the kept top-k checkpoints (the next one to go), as in Lightning; ``""`` before
        any or without ``monitor``."""
        return self._worst()[0] if self.monitor is not None and self.best_k_models else ""

    @property
    def kth_value(self) -> torch.Tensor:
        """The monitored value of :attr:`kth_best_model_path` (``inf`` for ``mode="min"`` before any, ``-inf`` for
        ``"max"``), a 0-d tensor as in Lightning."""
        if self.monitor is not None and self.best_k_models:
            return torch.tensor(self._worst()[1])
        return torch.tensor(math.inf if self.mode == "min" else -math.inf)

    @property
    def dirpath(self) -> Path | None:
        """Where checkpoints go: the directory given, or once ``fit`` has started, the run's own
        (``<log_dir>/checkpoints``), as Lightning sets it."""
        return self._dirpath if self._dirpath is not None else self._run_dirpath

    @dirpath.setter
    def dirpath(self, value: str | Path | None) -> None:
        self._dirpath = _absolute(value)

    @property
    def LAST_NAME(self) -> str:
        """The ``last`` checkpoint's name without extension: :attr:`CHECKPOINT_NAME_LAST`."""
        return self.CHECKPOINT_NAME_LAST

    @override
    def on_fit_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        if FIELD.search(self.CHECKPOINT_NAME_LAST) or not self.CHECKPOINT_NAME_LAST.strip() or \
                "/" in self.CHECKPOINT_NAME_LAST:
            raise ConfigError("ModelCheckpoint.CHECKPOINT_NAME_LAST", self.CHECKPOINT_NAME_LAST,
                              "must be one plain file name here: ckpt_path='last', resuming and pruning find the last "
                              "checkpoint by it (Lightning accepts a template such as '{epoch}-last').",
                              fix="a plain name such as 'last' or 'final'; filename='...' templates the others.")
        self._run_dirpath = self.resolve_dirpath(trainer)
        if self._unchecked:
            self._disown_foreign(self._run_dirpath)
        self._validated_step = -1
        self._deferred = False

    def saves_on_train_epoch_end(self, trainer: Trainer) -> bool:
        """Whether the epoch-based saves happen at the end of training epochs (else after validations), resolving
        ``save_on_train_epoch_end=None`` as Lightning does."""
        if self.save_on_train_epoch_end is not None:
            return self.save_on_train_epoch_end
        if trainer.check_val_every_n_epoch != 1:
            return False
        if sum(trainer.num_val_batches) == 0:
            return True
        return bool(trainer.val_check_interval == 1.0)

    @property
    @override
    def state_key(self) -> str:
        return f"ModelCheckpoint[monitor={self.monitor},mode={self.mode},every_n_epochs={self.every_n_epochs}," \
               f"every_n_train_steps={self.every_n_train_steps}]"

    @override
    def state_dict(self) -> dict[str, Any]:
        # Lightning's keys (values as plain floats: the checkpoint loads with weights_only=True).
        return {"monitor": self.monitor, "best_k_models": dict(self.best_k_models), "recent": dict(self._recent),
                "best_model_path": self.best_model_path, "best_model_score": self._best_score,
                "current_score": self._current_score, "kth_best_model_path": self.kth_best_model_path,
                "kth_value": float(self.kth_value), "last_model_path": self.last_model_path,
                "dirpath": str(self.dirpath) if self.dirpath else ""}

    @override
    def load_state_dict(self, state: dict[str, Any], /) -> None:
        from xtrain.core._internal.ranking_state import read_ranking

        ranking = read_ranking(state)  # refuses a field of another kind before any is set
        self.best_k_models, self._recent = ranking.best_k_models, ranking.recent
        if self.monitor is None and "recent" not in state:  # written before best_k_models stayed empty
            self._recent, self.best_k_models = self.best_k_models, {}
        self.best_model_path, self.last_model_path = ranking.paths["best_model_path"], ranking.paths["last_model_path"]
        self._best_score, self._current_score = ranking.best_score, ranking.current_score
        self._unchecked = True  # the default directory is known once fit starts, after the restore
        if self._dirpath is not None:
            self._disown_foreign(self._dirpath)

    def _disown_foreign(self, dirpath: Path) -> None:
        """Forget the paths of a restored state that this callback could not have written in ``dirpath``.

        The state comes from a checkpoint file, which may be hostile or another run's: its ranking decides what
        pruning deletes and its ``best_model_path`` what ``ckpt_path="best"`` loads. As Lightning on a changed
        ``dirpath``, what lies elsewhere leaves the ranking; a name the ``filename`` template cannot give (a user's
        ``backbone.ckpt`` beside the checkpoints) leaves it too. The files are never touched.
        """
        self._unchecked = False
        foreign = {path: why for path in (*self.best_k_models, *self._recent, self.best_model_path,
                                          self.last_model_path) if path and (why := self._foreign(path, dirpath))}
        if not foreign:
            return
        self.best_k_models = {k: v for k, v in self.best_k_models.items() if k not in foreign}
        self._recent = {k: v for k, v in self._recent.items() if k not in foreign}
        if self.best_model_path in foreign:
            self.best_model_path, self._best_score = "", None
        if self.last_model_path in foreign:
            self.last_model_path = ""
        listed = "; ".join(f"{path!r} ({why})" for path, why in list(foreign.items())[:5])
        more = f"; and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        warnings.warn(f"ModelCheckpoint(dirpath={str(dirpath)!r}): the state restored from the checkpoint names "
                      f"files this callback does not write: {listed}{more}. They leave its ranking, are not used as "
                      "the best or last checkpoint, and are kept (never deleted); delete them yourself if an earlier "
                      "run wrote them and you no longer need them.", UserWarning, stacklevel=2)

    def _foreign(self, path: str, dirpath: Path) -> str:
        """Why pruning must not delete ``path`` (``""``: it may, a file this callback writes in ``dirpath``)."""
        if not self._owns(path, dirpath):
            return f"not a {self.FILE_EXTENSION} file directly in {str(dirpath)!r}"
        pattern = name_pattern(self.filename or DEFAULT_FILENAME, auto_insert_metric_name=self.auto_insert_metric_name,
                               extension=self.FILE_EXTENSION, last_name=self.LAST_NAME)
        if pattern.fullmatch(Path(path).name) is None:
            return f"not a name that filename={self.filename or DEFAULT_FILENAME!r} or {self.LAST_NAME!r} gives"
        return ""

    def writes(self, path: str | Path, dirpath: Path) -> bool:
        """Whether ``path`` is a file this callback writes in ``dirpath``: directly there, named by its ``filename``
        template or ``last`` (with the ``-vN`` of the version counter). What a checkpoint file's state names is
        trusted only then (``ckpt_path="best"`` in a new process)."""
        return not self._foreign(str(path), dirpath)

    def resolve_dirpath(self, trainer: Trainer) -> Path:
        """Where checkpoints go for ``trainer``'s current run."""
        if self._dirpath is not None:
            return self._dirpath
        if trainer.loggers:
            return Path(trainer.loggers[0].run_dir, "checkpoints")
        return Path(trainer.default_root_dir) / "checkpoints"

    def last_checkpoint_candidates(self, trainer: Trainer) -> list[Path]:
        """Files ``ckpt_path="last"`` may pick, including those of earlier runs under the same logger root."""
        if self._dirpath is not None:
            dirs = [self._dirpath]
        elif trainer.loggers:
            logger = trainer.loggers[0]
            dirs = sorted(Path(logger.root_dir).glob("*/checkpoints"))
        else:
            dirs = [Path(trainer.default_root_dir) / "checkpoints"]
        lasts = [p for d in dirs for p in d.glob(f"{self.LAST_NAME}*{self.FILE_EXTENSION}")]
        return lasts or [p for d in dirs for p in d.glob(f"*{self.FILE_EXTENSION}")]

    @override
    def on_save_point(self, trainer: Trainer, module: TrainModule, /, *, epoch_end: bool) -> None:
        if trainer.sanity_checking or trainer.fast_dev_run:
            return
        if epoch_end:
            due = (self.saves_on_train_epoch_end(trainer) and self.every_n_epochs > 0
                   and trainer.current_epoch % self.every_n_epochs == 0)
            metrics, epoch = None, trainer.current_epoch - 1
        else:
            step = trainer.global_step
            if (self.train_time_interval is None and self._validated_step != step
                    and not (self.every_n_train_steps > 0 and step % self.every_n_train_steps == 0)):
                return  # the common step (runs every step): no save is due and no validation just ran
            (due, metrics), epoch = (self._step_save_due(trainer, self.saves_on_train_epoch_end(trainer)),
                                     trainer.current_epoch)
        if due and self._saved_step != trainer.global_step:
            self._save_point(trainer, epoch=epoch, metrics=metrics)

    def _step_save_due(self, trainer: Trainer, on_epoch_end: bool) -> tuple[bool, dict[str, Any]]:
        """Whether the save point after an optimizer step saves, and the metrics it ranks.

        As in Lightning, a step- or time-based save ranks the metrics of its batch's end, before a validation that
        followed it (the file is written after that validation, so a resume does not repeat it); one before the
        monitored key exists waits for the next validation, and validations save by themselves when the epoch-based
        saves do not happen at epoch ends.
        """
        step = trainer.global_step
        validated = self._validated_step == step
        before = self._pre_validation
        metrics = before[1] if validated and before is not None and before[0] == step else \
            dict(trainer.callback_metrics)
        due = self.every_n_train_steps > 0 and step % self.every_n_train_steps == 0
        if self.train_time_interval is not None:
            elapsed = time.monotonic() - self._last_time >= self.train_time_interval.total_seconds()
            due = bool(trainer.strategy.broadcast(due or elapsed))
        if due and self.monitor is not None and self.monitor not in metrics:
            self._deferred, due = True, False
        elif due and self.monitor is not None and validated and trainer.is_last_batch and not on_epoch_end:
            metrics = dict(trainer.callback_metrics)  # Lightning defers this one past the epoch's validation
        if validated and not on_epoch_end:
            if not due and (self._deferred or (self.every_n_epochs > 0
                                               and (trainer.current_epoch + 1) % self.every_n_epochs == 0)):
                due, metrics = True, dict(trainer.callback_metrics)
            self._deferred = False
        return due, metrics

    def _save_point(self, trainer: Trainer, *, epoch: int, metrics: dict[str, Any] | None = None) -> None:
        """Save now unless the monitored key is missing before any validation or ``max_overhead`` skips it."""
        if self._unranked(trainer):
            return
        throttled = self._throttled(trainer)
        self._skipped_epoch = epoch if throttled else None
        if not throttled:
            self._save(trainer, epoch=epoch, metrics=metrics)

    def _throttled(self, trainer: Trainer) -> bool:
        """Whether ``max_overhead`` skips this save point; rank 0's clock decides for all ranks."""
        if self.max_overhead is None or self._save_seconds is None:
            return False
        wait = min(self._save_seconds / self.max_overhead, self.MAX_OVERHEAD_WAIT)
        return bool(trainer.strategy.broadcast(time.monotonic() - self._last_time < wait))

    @override
    def on_train_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        self._last_time = time.monotonic()  # as Lightning: train_time_interval counts from here, not from __init__

    @override
    def on_validation_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        if not trainer.sanity_checking:
            self._pre_validation = (trainer.global_step, dict(trainer.callback_metrics))

    @override
    def on_validation_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        if not trainer.sanity_checking:
            self._validated_step = trainer.global_step

    def saved_elsewhere(self, trainer: Trainer, path: str) -> None:
        """The run was saved to ``path`` at this step outside this callback (a preemption's save): it becomes
        ``last_model_path``, and the end of training does not save this step again (a preempted job has seconds)."""
        self.last_model_path = path
        self._saved_step = trainer.global_step

    @override
    def on_train_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        if self._stopped_mid_epoch(trainer):
            # As Lightning, whose epoch end also runs when max_steps, max_time or should_stop cut an epoch short:
            # that epoch is saved (after the validation the stop ran, so the ranking includes it).
            self._save(trainer, epoch=trainer.current_epoch)
        if self._skipped_epoch is not None and self._saved_step != trainer.global_step:
            # A save point max_overhead skipped is made up: the run ends with its latest state saved all the same.
            self._save(trainer, epoch=self._skipped_epoch)
        if self.save_last and self._saved_step != trainer.global_step and not trainer.fast_dev_run:
            self._write(trainer, [])
        trainer.strategy.checkpoint_io.settle()  # every rank may read the files next (test(ckpt_path="best"))
        trainer.strategy.barrier("checkpoints_in_place")

    def _stopped_mid_epoch(self, trainer: Trainer) -> bool:
        stopped = 0 < trainer.max_steps <= trainer.global_step or trainer.should_stop
        return (stopped and trainer.fit_loop.batch_idx > 0 and self._saved_step != trainer.global_step
                and self.every_n_epochs > 0 and (trainer.current_epoch + 1) % self.every_n_epochs == 0
                and self.saves_on_train_epoch_end(trainer) and not trainer.fast_dev_run
                and (self.monitor is None or self.monitor in trainer.callback_metrics))

    def _unranked(self, trainer: Trainer) -> bool:
        """Whether this save point is skipped because the monitored key is missing before any validation ran
        (Lightning warns then; once validation has run, :meth:`_score` raises)."""
        if self.monitor is None or self.monitor in trainer.callback_metrics or self._validated_step >= 0:
            return False
        warnings.warn(f"ModelCheckpoint(monitor={self.monitor!r}) skips its save points until {self.monitor!r} is "
                      "logged: no validation has run yet.", UserWarning, stacklevel=2)
        return True

    def _score(self, metrics: dict[str, Any]) -> float | None:
        if self.monitor is None:
            return None
        value = metrics.get(self.monitor)
        if value is None:
            logged = sorted(metrics)
            raise ConfigError("monitor", self.monitor, "is not among the logged metrics at this save point, so "
                              "ModelCheckpoint cannot rank the checkpoint"
                              + (f" (logged: {format_choices(logged)})." if logged else " (nothing is logged)."),
                              fix=f"log it with self.log({self.monitor!r}, value) in training_step or "
                                  "validation_step, or monitor a logged key.")
        return float(value.item() if isinstance(value, torch.Tensor) else value)

    def _format(self, trainer: Trainer, epoch: int, metrics: dict[str, Any]) -> str:
        template = self.filename or DEFAULT_FILENAME
        values: dict[str, Any] = {"epoch": epoch, "step": trainer.global_step}
        values.update({k: float(v.item() if isinstance(v, torch.Tensor) else v)
                       for k, v in metrics.items()})

        def field(match: re.Match[str]) -> str:
            name, spec = match.group(1), (match.group(2) or "")
            value = values.get(name, 0)  # as Lightning: a metric not logged yet reads 0
            text = format(value, spec[1:]) if spec else str(value)
            return f"{name}={text}" if self.auto_insert_metric_name else text

        return FIELD.sub(field, template).replace("/", "_")

    def _better(self, score: float, than: float) -> bool:
        return score < than if self.mode == "min" else score > than

    def _save(self, trainer: Trainer, *, epoch: int, metrics: dict[str, Any] | None = None) -> None:
        """Save the run as it is now; ``epoch`` is the epoch the checkpoint belongs to (for the file name)."""
        metrics = dict(trainer.callback_metrics) if metrics is None else metrics
        score = self._score(metrics)
        self._current_score = score
        dirpath = self.resolve_dirpath(trainer)
        path = self._versioned(dirpath / f"{self._format(trainer, epoch, metrics)}{self.FILE_EXTENSION}")
        keep: list[Path] = []
        if self.save_top_k != 0:
            if score is None:  # no monitor (the same on every rank)
                keep.append(path)
                self._recent[str(path)] = float(trainer.global_step)
            elif self._agreed(trainer, not math.isnan(score) and (
                    self.save_top_k == -1 or len(self.best_k_models) < self.save_top_k
                    or self._better(score, self._worst()[1]))):
                keep.append(path)
                self.best_k_models[str(path)] = score
        if not keep and not self.save_last:
            return
        # The ranking (and best_model_path) is settled before writing, so the checkpoint's own state names itself
        # as the best when it is; ckpt_path="best" in a new process reads it from last.ckpt.
        doomed = self._prune(keep[0]) if keep else []
        self._write(trainer, keep, epoch=epoch)
        if not doomed:
            return
        started_from = _resolved(trainer.ckpt_path)
        for old in doomed:
            # The file the run was started from is the user's: resuming from a best checkpoint for more epochs
            # must not delete it when a better one comes (it leaves the ranking all the same).
            if (old != self.last_model_path and not self._foreign(old, dirpath)
                    and (started_from is None or _resolved(old) != started_from)):
                trainer.strategy.remove_checkpoint(old)

    @staticmethod
    def _agreed(trainer: Trainer, better: bool) -> bool:
        """Whether every rank ranks this checkpoint into the top k, as Lightning decides: a metric logged without
        ``sync_dist`` differs between ranks, and ranks that disagree would save on some ranks only and hang."""
        return better if trainer.world_size == 1 else trainer.strategy.reduce_boolean_decision(better, all=True)

    def _owns(self, path: str, dirpath: Path) -> bool:
        """Whether pruning may delete ``path``: a ``*.ckpt`` directly in this run's checkpoint directory. The ranking
        comes back from a checkpoint file on resume, and a file must never make the run delete anything else (a
        hostile ``best_k_models`` naming ``/home``; an earlier run's directory after ``dirpath`` changed)."""
        candidate = Path(path)
        if not candidate.name.endswith(self.FILE_EXTENSION) or candidate.is_symlink():
            return False
        # The same spelling is the same directory; resolving both (a stat per component) is for the other cases.
        return candidate.parent == dirpath or candidate.parent.resolve() == dirpath.resolve()

    def _worst(self) -> tuple[str, float]:
        pick = max if self.mode == "min" else min
        return pick(self.best_k_models.items(), key=lambda kv: kv[1])

    def _prune(self, newest: Path) -> list[str]:
        """Drop the checkpoints beyond ``save_top_k`` from the ranking; returns their paths (deleted after saving)."""
        doomed: list[str] = []
        if self.save_top_k == -1:
            pass
        elif self.monitor is None:
            ordered = sorted(self._recent.items(), key=lambda kv: kv[1])
            doomed = [old for old, _ in ordered[: max(len(ordered) - self.save_top_k, 0)]]
            for old in doomed:
                del self._recent[old]
        else:
            while len(self.best_k_models) > self.save_top_k:
                doomed.append(self._worst()[0])
                del self.best_k_models[doomed[-1]]
        if self.monitor is not None and self.best_k_models:
            pick = min if self.mode == "min" else max
            self.best_model_path, self.best_model_score = pick(self.best_k_models.items(), key=lambda kv: kv[1])
        else:
            self.best_model_path = str(newest)
        return doomed

    def _versioned(self, path: Path) -> Path:
        """``path``, or ``name-vN`` beside it when a file this callback does not own is already there. What a killed
        sharded save left under the name is no checkpoint: the save replaces it (as the checkpoints guide says)."""
        if not self.enable_version_counter:
            return path
        from xtrain.core.sharded_checkpoint import interrupted_save

        candidate, version = path, 1
        owned = {*self.best_k_models, *self._recent, self.last_model_path}
        while candidate.exists() and str(candidate) not in owned and not interrupted_save(candidate):
            candidate = path.with_name(f"{path.stem}-v{version}{path.suffix}")
            version += 1
        return candidate

    def _write(self, trainer: Trainer, paths: list[Path], *, epoch: int | None = None) -> None:
        """Write the run to ``paths`` (and ``last``); ``epoch``: the epoch the save belongs to, for the message (an
        epoch end's save is taken once ``current_epoch`` counts the next one)."""
        targets = list(paths)
        if self.save_last:
            last = self._versioned(self.resolve_dirpath(trainer) / f"{self.LAST_NAME}{self.FILE_EXTENSION}")
            targets.append(last)
            self.last_model_path = str(last)
        started = time.monotonic()
        trainer._save_checkpoint_to(targets, weights_only=self.save_weights_only, wait=False)
        self._saved_step = trainer.global_step
        self._last_time = time.monotonic()
        self._save_seconds = self._last_time - started
        self._skipped_epoch = None
        if self.verbose and trainer.is_global_zero:
            score = f" ({self.monitor}={self.best_k_models[str(paths[0])]:.6g})" if paths and self.monitor else ""
            print(f"Epoch {trainer.current_epoch if epoch is None else epoch}, global step {trainer.global_step}: saved "
                  f"{', '.join(str(p) for p in targets)}{score}")
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                if type(logger).after_save_checkpoint is not Logger.after_save_checkpoint:
                    trainer.strategy.checkpoint_io.settle()  # it reads the files (log_model)
                for target in targets:
                    logger.after_save_checkpoint(target)


def _resolved(path: str | Path | None) -> Path | None:
    if path is None:
        return None
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return None
