"""Metrics, parameters and checkpoints to an MLflow tracking store (needs ``pip install "xtrain-core[mlflow]"``)."""

from __future__ import annotations

import importlib.util
import os
import re
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from xtrain.core._internal.no_experiment import rank_zero_experiment
from xtrain.core.errors import ConfigError
from xtrain.core.loggers.logger import PathStr
from xtrain.core.loggers.tracker import LogModel, TrackerLogger
from xtrain.core.rank_zero import rank_zero_only

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

__all__ = ["MLFlowLogger"]

_END = {"success": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
_PARAM_LIMIT = 6000  # characters MLflow stores per parameter value
_NOT_IN_METRIC_NAMES = re.compile(r"[^a-zA-Z0-9_/. -]+")
_IDENTITY_TAG = "xtrain.run_name"  # the run identity (ckpt_path="auto") a run was created for


def _supports_synchronous() -> bool:
    """Whether the installed mlflow's logging calls take ``synchronous=`` (mlflow 2.8 and later); asked only when the
    option is given, since it imports mlflow."""
    import inspect

    from mlflow.tracking import MlflowClient

    return "synchronous" in inspect.signature(MlflowClient.log_batch).parameters


def _resolve_tags(tags: dict[str, Any]) -> dict[str, Any]:
    """``tags`` with MLflow's context tags (``mlflow.user``, ``mlflow.source.name``, ``mlflow.source.type``, git
    commit...) added, through MLflow's tag context registry where this mlflow has one, as ``mlflow.start_run`` and
    Lightning's logger do."""
    try:
        from mlflow.tracking.context.registry import resolve_tags
    except ImportError:
        return tags
    resolved: dict[str, Any] = resolve_tags(tags)
    return resolved


def _flatten(params: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}/"))
        else:
            out[name] = str(value)[:_PARAM_LIMIT]
    return out


class MLFlowLogger(TrackerLogger):
    """Logs a run to MLflow: a local SQLite store by default, or any tracking server.

    As in Lightning, :attr:`name` is the MLflow experiment id and :attr:`version` the run id, and the run's local
    directory (:attr:`log_dir`, with the checkpoints by default) is ``save_dir/<experiment id>/<run id>``. The run
    is created the first time its id is needed (:attr:`run_id`, :attr:`version`, :attr:`log_dir`,
    :attr:`experiment`, or the first logged value); the Trainer asks for it when a stage starts.

    The MLflow run id is stored in checkpoints, so a run resumed with ``ckpt_path`` continues the same MLflow run
    (MLflow keeps every value: a crashed attempt's values after its last checkpoint stay in the metric history).
    With ``ckpt_path="auto"`` the run is tagged ``xtrain.run_name`` with the run's identity, and a restart finds and
    continues it.

    The first five arguments may be given by position, in Lightning's order (``MLFlowLogger("experiment")`` names
    the experiment, as it does there); the others by keyword.

    Args:
        experiment_name: The MLflow experiment (created when missing).
        run_name: The run's display name.
        tracking_uri: The store: ``sqlite:///path.db``, ``http://host:5000``, ... (default: the
            ``MLFLOW_TRACKING_URI`` environment variable, else the SQLite file below).
        tags: Tags of the run (MLflow's context tags, ``mlflow.user`` and the like, are added as
            ``mlflow.start_run`` adds them).
        save_dir: Where the default store (``save_dir/mlflow.db``, artifacts in ``save_dir/mlartifacts``) and, by
            default, the checkpoints (``save_dir/<experiment id>/<run id>/checkpoints``) go.
        log_model: Upload checkpoints under the run's ``checkpoints/`` artifacts: ``True`` when the run ends,
            ``"all"`` as saved.
        prefix: Put ``prefix-`` before every metric name, as Lightning's ``prefix``.
        run_id: Continue this existing MLflow run instead of starting one.
        artifact_location: Artifact root of a newly created experiment.
        synchronous: Passed to MLflow's logging calls (``False``: MLflow logs in its own background queue); an
            mlflow older than 2.8 has no such option, and it is ignored there with a warning. ``None`` leaves
            MLflow's default.
    """

    def __init__(self, experiment_name: str = "xtrain_logs", run_name: str | None = None,
                 tracking_uri: str | None = None, tags: dict[str, Any] | None = None,
                 save_dir: str | os.PathLike[str] = ".", *, log_model: LogModel = False, prefix: str = "",
                 run_id: str | None = None,
                 artifact_location: str | None = None, synchronous: bool | None = None) -> None:
        if importlib.util.find_spec("mlflow") is None:
            raise ConfigError("logger", "MLFlowLogger", "needs the mlflow package.",
                              fix='pip install "xtrain-core[mlflow]"')
        if synchronous is not None and not _supports_synchronous():
            warnings.warn(f"MLFlowLogger(synchronous={synchronous}) is ignored: the installed mlflow's logging calls "
                          f"take no synchronous argument (mlflow 2.8 and later do).", UserWarning, stacklevel=2)
            synchronous = None
        # The version is the run id: None until the run is created (or the run given).
        super().__init__(save_dir, name=experiment_name, version=run_id, log_model=log_model)
        self._run_name = run_name
        local = tracking_uri is None and not os.environ.get("MLFLOW_TRACKING_URI")
        root = Path(save_dir).resolve()
        self.tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"
        self._artifact_location = artifact_location or ((root / "mlartifacts").as_uri() if local else None)
        self._tags = dict(tags or {})
        self._renamed: set[str] = set()  # metric names logged without characters MLflow refuses (warned once)
        self._prefix = prefix
        self._log_kwargs: dict[str, Any] = {} if synchronous is None else {"synchronous": synchronous}
        self._resumed = run_id is not None
        self._experiment_id: str | None = None
        self._run_identity: str | None = None
        self._client: MlflowClient | None = None

    def _get_client(self) -> MlflowClient:
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    @property
    def run_id(self) -> str | None:
        """The MLflow run id: the run is created now if it does not exist yet (on global rank 0 only; other ranks
        get ``None`` until the Trainer hands them rank 0's id)."""
        if self._version is None and rank_zero_only.rank == 0:
            self._submit(lambda: None)  # opening creates the run, on the worker thread as every MLflow call
        if self._opened:
            self.save()
        return None if self._version is None else str(self._version)

    @property
    def experiment_id(self) -> str:
        """The MLflow experiment id: the given run's experiment, else the experiment named ``experiment_name``
        (created if missing)."""
        if self._experiment_id is None:
            client = self._get_client()
            if self._version is not None:
                self._experiment_id = str(client.get_run(str(self._version)).info.experiment_id)
            else:
                self._experiment_id = self._find_experiment(client)
        return self._experiment_id

    def _find_experiment(self, client: MlflowClient) -> str:
        found = client.get_experiment_by_name(self._name)
        if found is not None and found.lifecycle_stage != "deleted":
            return str(found.experiment_id)
        try:
            return str(client.create_experiment(self._name, artifact_location=self._artifact_location))
        except Exception:  # another rank or process created it meanwhile
            again = client.get_experiment_by_name(self._name)
            if again is None:
                raise
            return str(again.experiment_id)

    @property
    @override
    def name(self) -> str:
        """The MLflow experiment id (as Lightning's ``MLFlowLogger.name``); ``experiment_name`` is the name."""
        return self.experiment_id

    @property
    @override
    def version(self) -> str:
        """The MLflow run id (as Lightning's ``MLFlowLogger.version``), created if needed; see :attr:`run_id`."""
        return self.run_id or ""

    @override
    def _version_dir(self) -> Path:
        return self._save_dir / self.name / self.version

    @property
    @override
    def root_dir(self) -> PathStr:
        return PathStr(self._save_dir / self.name)

    @property
    @rank_zero_experiment
    def experiment(self) -> MlflowClient:
        """The ``MlflowClient`` of the tracking store (waits for the queued writes; starts the run if needed); on
        other ranks than global rank 0 an object on which every call does nothing (only rank 0 writes)."""
        if not self._opened:
            self._submit(lambda: None)
        self.save()
        assert self._client is not None
        return self._client

    @override
    def name_run(self, name: str) -> None:
        """Continue the run created for run identity ``name`` (``ckpt_path="auto"``), found by its tag, or create
        one tagged with it: restarts of a run then log into one MLflow run and one directory."""
        if not self._version_given:
            self._run_identity = name

    @override
    def _open(self) -> None:
        client = self._get_client()
        if self._version is None and self._run_identity is not None:
            quoted = self._run_identity.replace("'", "\\'")
            found = client.search_runs([self.experiment_id], f"tags.`{_IDENTITY_TAG}` = '{quoted}'",
                                       order_by=["attributes.start_time DESC"], max_results=1)
            if found:
                self._version = found[0].info.run_id
        if self._version is not None:
            client.update_run(str(self._version), status="RUNNING")
            self._resumed = True
            return
        tags = dict(self._tags)
        if self._run_identity is not None:
            tags[_IDENTITY_TAG] = self._run_identity
        run = client.create_run(self.experiment_id, run_name=self._run_name, tags=_resolve_tags(tags))
        self._version = run.info.run_id

    @override
    def _write_metrics(self, rows: list[tuple[dict[str, float], int]]) -> None:
        from mlflow.entities import Metric

        assert self._client is not None and self._version is not None
        now = int(time.time() * 1000)
        items = [Metric(self._metric_name(k), float(v), now, step) for metrics, step in rows for k, v in metrics.items()]
        for start in range(0, len(items), 1000):  # MLflow's limit per log_batch
            self._client.log_batch(str(self._version), metrics=items[start:start + 1000], **self._log_kwargs)

    def _metric_name(self, key: str) -> str:
        """``key`` with the characters MLflow refuses in a metric name removed, as Lightning's MLFlowLogger does: one
        such name (``acc@1``) failed the whole batch of values logged with it, and the run. Warned once per key."""
        name = _NOT_IN_METRIC_NAMES.sub("", key)
        if name != key and key not in self._renamed:
            self._renamed.add(key)
            warnings.warn(f"MLFlowLogger: MLflow metric names may hold only letters, digits, '_', '-', '.', ' ' and "
                          f"'/': {key!r} is logged as {name!r}.", RuntimeWarning, stacklevel=2)
        return name

    @override
    def _write_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        assert self._client is not None and self._version is not None
        run_id = str(self._version)
        flat = _flatten(params)
        if self._resumed:  # MLflow parameters are write-once: a resumed run logs only new ones
            existing = self._client.get_run(run_id).data.params
            changed = sorted(k for k, v in flat.items() if k in existing and existing[k] != v)
            if changed:
                warnings.warn(f"MLflow run {run_id} already has parameters {changed} with other values; "
                              f"MLflow keeps the first values.", UserWarning, stacklevel=1)
            flat = {k: v for k, v in flat.items() if k not in existing}
        items = [Param(k, v) for k, v in flat.items()]
        for start in range(0, len(items), 100):
            self._client.log_batch(run_id, params=items[start:start + 100], **self._log_kwargs)

    @override
    def _write_artifact(self, path: Path) -> None:
        assert self._client is not None and self._version is not None
        if path.is_dir():
            self._client.log_artifacts(str(self._version), str(path), f"checkpoints/{path.name}")
        else:
            self._client.log_artifact(str(self._version), str(path), "checkpoints")

    @override
    def _close(self, status: str) -> None:
        if self._client is not None and self._version is not None:
            self._client.set_terminated(str(self._version), _END[status])

    @override
    def state_dict(self) -> dict[str, Any]:
        run_id = self.run_id
        return {"version": run_id, "name": self._name, "run_id": run_id}

    @override
    def resume(self, state: dict[str, Any], *, step: int) -> None:
        """Continue the checkpoint's MLflow run: its ``run_id`` (older checkpoints hold a ``version_N`` directory as
        ``version``, which is not a run)."""
        if not self.continues(state) or not state.get("run_id"):
            return
        run_id = str(state["run_id"])
        if self._opened and self._version != run_id:
            # This process had already started a run of its own (its id was asked for): end it, then go on in the
            # checkpoint's run.
            self.finalize("interrupted")
        self._version, self._resumed, self._experiment_id = run_id, True, None

    @override
    def continues(self, state: dict[str, Any]) -> bool:
        return not self._version_given or state.get("run_id") == self._version

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_client": None}
