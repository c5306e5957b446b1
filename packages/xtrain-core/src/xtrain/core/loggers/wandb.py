"""Metrics, hyperparameters and checkpoints to Weights & Biases (needs ``pip install "xtrain-core[wandb]"``)."""

from __future__ import annotations

import atexit
import importlib.util
import os
import secrets
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from typing_extensions import override

from xtrain.core._internal.no_experiment import rank_zero_experiment
from xtrain.core.errors import ConfigError
from xtrain.core.loggers.tracker import LogModel, TrackerLogger
from xtrain.core.rank_zero import rank_zero_only

if TYPE_CHECKING:
    from wandb.sdk.wandb_run import Run

__all__ = ["WandbLogger"]

_STEP_KEY = "trainer/global_step"


def _plain(value: Any) -> Any:
    """A value W&B's config stores as is (numbers, strings, containers of them); anything else as its repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)


class WandbLogger(TrackerLogger):
    """Logs a run to W&B: online, or offline into ``save_dir/wandb`` for ``wandb sync`` later.

    The run id is chosen when the logger is created (or given as ``version``) and stored in checkpoints, so a run
    resumed with ``ckpt_path`` continues the same W&B run. Every row also holds ``trainer/global_step``, the
    x-axis of every metric, as Lightning's ``WandbLogger`` logs it (not with ``sync_tensorboard``); each call is one
    row (W&B's own ``_step`` counts rows). A resumed run logs the steps after its checkpoint again: rows with those
    ``trainer/global_step`` values appear twice, the crashed attempt's and the resumed one's, as in Lightning.

    As in Lightning, one logger is one W&B run for all the stages it logs (``fit`` then ``test`` is one run, its
    config, history and summary together): a stage that ends successfully sends everything and leaves the run
    open; the run ends when :meth:`finish` is called, when a stage fails or is interrupted (then with exit code 1,
    so a resumed attempt starts cleanly), or when the interpreter exits.

    The first four arguments may be given by position, in Lightning's order (``WandbLogger("run-name")`` names the
    run, as it does there); the others by keyword.

    Args:
        name: The run's display name (default: chosen by W&B).
        save_dir: Where W&B's local files go (``save_dir/wandb``) and, by default, the checkpoints
            (``save_dir/project/<run id>/checkpoints``).
        version: The run id (default: a new random id).
        offline: Write locally only; upload later with ``wandb sync``.
        project: The W&B project.
        log_model: Upload checkpoints as ``model`` artifacts: ``True`` at the end of each successful stage,
            ``"all"`` as saved.
        prefix: Put ``prefix-`` before every metric name, as Lightning's ``prefix``.
        checkpoint_name: The name of the model artifact ``log_model`` uploads (default: ``model-<run id>``).
        entity: The W&B team or user.
        group: Group related runs (e.g. the runs of a sweep).
        tags: Tags of the run.
        init_kwargs: Anything else for ``wandb.init``.
        **kwargs: Passed to ``wandb.init`` too (``job_type``, ``notes``, ``mode``, ``config``, ``resume``,
            ``reinit``, ...), as Lightning's ``WandbLogger`` does; ``id`` is taken as ``version`` and ``dir`` as
            ``save_dir``.
    """

    def __init__(self, name: str | None = None, save_dir: str | os.PathLike[str] = ".", version: str | None = None,
                 offline: bool = False, *, project: str = "xtrain_logs", log_model: LogModel = False, prefix: str = "",
                 checkpoint_name: str | None = None, entity: str | None = None, group: str | None = None,
                 tags: list[str] | None = None, init_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if importlib.util.find_spec("wandb") is None:
            raise ConfigError("logger", "WandbLogger", "needs the wandb package.",
                              fix='pip install "xtrain-core[wandb]"')
        given_id = kwargs.pop("id", None)
        if "dir" in kwargs:  # Lightning's alias of save_dir
            given_dir = kwargs.pop("dir")
            save_dir = given_dir if given_dir is not None and str(save_dir) == "." else save_dir
        super().__init__(save_dir, name=project, version=version or given_id, log_model=log_model)
        self._run_name = name
        self._offline = offline
        self._prefix = prefix
        self._checkpoint_name = checkpoint_name
        self._init_kwargs = {"entity": entity, "group": group, "tags": tags, **(init_kwargs or {}), **kwargs}
        self._run: Run | None = None
        self._end_status = "success"  # how the open run ends at exit: the last stage's status
        self._exit_hook: Any = None

    @property
    @override
    def version(self) -> str:
        if self._version is None:
            self._version = secrets.token_hex(4)
        return str(self._version)

    @property
    @rank_zero_experiment
    def experiment(self) -> Run:
        """The ``wandb`` run (waits for the queued writes, and starts the run if nothing was logged yet); on other
        ranks than global rank 0 an object on which every call does nothing (only rank 0 writes)."""
        if not self._opened:
            self._submit(lambda: None)
        self.save()
        assert self._run is not None
        return self._run

    def watch(self, model: Any, log: Literal["gradients", "parameters", "all"] | None = "gradients",
              log_freq: int = 100, log_graph: bool = True) -> None:
        """Have W&B log ``model``'s gradients (``log="parameters"``/``"all"``: also its weights) every ``log_freq``
        backward passes, and its graph, through ``wandb.Run.watch`` (starts the run if needed)."""
        self.experiment.watch(model, log=log, log_freq=log_freq, log_graph=log_graph)

    def unwatch(self, model: Any = None) -> None:
        """Stop what :meth:`watch` started (for ``model``, or every watched model)."""
        self.experiment.unwatch(model)

    def log_table(self, key: str, columns: list[str | int] | None = None, data: list[list[Any]] | None = None,
                  dataframe: Any = None, step: int | None = None) -> None:
        """Log a ``wandb.Table`` (from ``columns`` and ``data``, or a pandas ``dataframe``), as Lightning's."""
        import wandb

        self._log_media(key, wandb.Table(columns=columns, data=data, dataframe=dataframe), step)

    def log_text(self, key: str, columns: list[str | int] | None = None, data: list[list[Any]] | None = None,
                 dataframe: Any = None, step: int | None = None) -> None:
        """Log text as a ``wandb.Table``, as Lightning's ``log_text``."""
        self.log_table(key, columns, data, dataframe, step)

    def log_image(self, key: str, images: list[Any], step: int | None = None, **kwargs: list[Any]) -> None:
        """Log ``images`` (arrays, tensors, PIL images or paths) as ``wandb.Image``; each keyword (``caption``,
        ``masks``, ...) is a list with one value per image, as in Lightning's."""
        self._log_media_list(key, "Image", images, step, kwargs)

    def log_audio(self, key: str, audios: list[Any], step: int | None = None, **kwargs: list[Any]) -> None:
        """Log ``audios`` as ``wandb.Audio`` (``sample_rate=[...]``, ``caption=[...]``), as Lightning's."""
        self._log_media_list(key, "Audio", audios, step, kwargs)

    def log_video(self, key: str, videos: list[Any], step: int | None = None, **kwargs: list[Any]) -> None:
        """Log ``videos`` as ``wandb.Video`` (``fps=[...]``, ``caption=[...]``), as Lightning's."""
        self._log_media_list(key, "Video", videos, step, kwargs)

    def _log_media_list(self, key: str, kind: str, items: list[Any], step: int | None,
                        options: dict[str, list[Any]]) -> None:
        if not isinstance(items, list):
            raise ConfigError(key, type(items).__name__, f"log_{kind.lower()} takes a list of items.",
                              fix=f"pass [{kind.lower()}] for one.")
        uneven = sorted(name for name, values in options.items() if len(values) != len(items))
        if uneven:
            raise ConfigError(", ".join(uneven), [len(options[name]) for name in uneven],
                              f"must hold one value per item for log_{kind.lower()} ({len(items)} items).",
                              fix=f"pass lists of length {len(items)}.")
        if rank_zero_only.rank != 0:
            return
        import wandb

        media = getattr(wandb, kind)
        self._log_media(key, [media(item, **{name: values[i] for name, values in options.items()})
                              for i, item in enumerate(items)], step)

    def _log_media(self, key: str, value: Any, step: int | None) -> None:
        """One row with ``value`` under the prefixed ``key`` (and ``trainer/global_step`` when ``step`` is given),
        after the metrics already queued (on other ranks than 0, ``experiment`` does nothing)."""
        row = self._add_prefix({key: value})
        self.experiment.log({**row, _STEP_KEY: step} if step is not None else row)

    def finish(self, status: str = "success") -> None:
        """End the W&B run now (stages end with the run left open; see the class). A later call starts a new
        attempt of the same run id."""
        self._end_status = status
        super().finalize(status)
        self._forget_exit_hook()

    @override
    def finalize(self, status: str) -> None:
        """End of a stage: upload what ``log_model`` kept and send everything, leaving the run open for the next stage
        (it ends at :meth:`finish` or at exit); a stage that failed or was interrupted ends the run."""
        if status != "success" or not self._opened:
            self.finish(status)
            return
        self._end_status = status
        self._upload_kept()
        self.save()
        if self._exit_hook is None:
            self._exit_hook = _exit_hook(self)
            atexit.register(self._exit_hook)

    def _forget_exit_hook(self) -> None:
        if self._exit_hook is not None:
            atexit.unregister(self._exit_hook)
            self._exit_hook = None

    @override
    def _open(self) -> None:
        import wandb

        # The user's wandb.init arguments win over these defaults (resume="must", as in Lightning's resume recipe).
        init = {"dir": str(self.save_dir), "project": self.name, "name": self._run_name, "id": self.version,
                "resume": "allow", "reinit": "create_new", "mode": "offline" if self._offline else None,
                **self._init_kwargs}
        self._run = wandb.init(**init)
        if not self._init_kwargs.get("sync_tensorboard"):
            # Lightning's x-axis: dashboards and reports built on its runs plot against trainer/global_step.
            self._run.define_metric(_STEP_KEY)
            self._run.define_metric("*", step_metric=_STEP_KEY, step_sync=True)

    @override
    def _write_metrics(self, rows: list[tuple[dict[str, float], int]]) -> None:
        # One W&B row per call, its step in trainer/global_step, as Lightning's WandbLogger: W&B's own step only
        # goes forward and merges rows given the same one, so passing the trainer's step lost values (every
        # validation batch's on_step values, on their own count behind the global step, landed on one row; a
        # validate() after fit replaced fit's last values).
        assert self._run is not None
        with_step = not self._init_kwargs.get("sync_tensorboard")
        for metrics, step in rows:
            self._run.log({**metrics, _STEP_KEY: step} if with_step else metrics)

    @override
    def _write_params(self, params: dict[str, Any]) -> None:
        assert self._run is not None
        self._run.config.update(_plain(params), allow_val_change=True)  # type: ignore[no-untyped-call]

    @override
    def _write_artifact(self, path: Path) -> None:
        import wandb

        assert self._run is not None
        artifact = wandb.Artifact(self._checkpoint_name or f"model-{self._run.id}", type="model",
                                  metadata={"file": path.name})
        if path.is_dir():
            artifact.add_dir(str(path), name=path.name)
        else:
            artifact.add_file(str(path), name=path.name)
        self._run.log_artifact(artifact, aliases=["latest", path.stem])

    @override
    def _close(self, status: str) -> None:
        if self._run is not None:
            self._run.finish(exit_code=0 if status == "success" else 1)
            self._run = None

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_run": None, "_exit_hook": None}


def _exit_hook(logger: WandbLogger) -> Any:
    """An ``atexit`` function that ends ``logger``'s open run (registered after ``wandb.init``, so it runs before
    W&B's own exit handling), holding the logger only weakly."""
    ref = weakref.ref(logger)

    def end() -> None:
        found = ref()
        if found is not None and found._opened:
            found._exit_hook = None
            found.finish(found._end_status)

    return end
