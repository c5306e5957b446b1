"""Metrics, parameters and checkpoints to an MLflow tracking store (needs ``pip install "xtrain-core[mlflow]"``)."""

from __future__ import annotations

import importlib.util
import os
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.core.loggers.tracker import LogModel, TrackerLogger

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

__all__ = ["MLFlowLogger"]

_END = {"success": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
_PARAM_LIMIT = 6000  # characters MLflow stores per parameter value


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

    The MLflow run id is stored in checkpoints, so a run resumed with ``ckpt_path`` continues the same MLflow run
    (MLflow keeps every value: a crashed attempt's values after its last checkpoint stay in the metric history).

    Args:
        save_dir: Where the default store (``save_dir/mlflow.db``, artifacts in ``save_dir/mlartifacts``) and, by
            default, the checkpoints (``save_dir/experiment_name/version_N/checkpoints``) go.
        experiment_name: The MLflow experiment (created when missing).
        run_name: The run's display name.
        tracking_uri: The store: ``sqlite:///path.db``, ``http://host:5000``, ... (default: the
            ``MLFLOW_TRACKING_URI`` environment variable, else the SQLite file above).
        tags: Tags of the run.
        log_model: Upload checkpoints under the run's ``checkpoints/`` artifacts: ``True`` when the run ends,
            ``"all"`` as saved.
        run_id: Continue this existing MLflow run instead of starting one.
        artifact_location: Artifact root of a newly created experiment.
        version: The local version directory (default: the next free ``version_N``).
    """

    def __init__(self, save_dir: str | os.PathLike[str] = ".", *, experiment_name: str = "xtrain_logs",
                 run_name: str | None = None, tracking_uri: str | None = None, tags: dict[str, str] | None = None,
                 log_model: LogModel = False, run_id: str | None = None, artifact_location: str | None = None,
                 version: int | str | None = None) -> None:
        if importlib.util.find_spec("mlflow") is None:
            raise ConfigError("logger", "MLFlowLogger", "needs the mlflow package.",
                              fix='pip install "xtrain-core[mlflow]"')
        super().__init__(save_dir, name=experiment_name, version=version, log_model=log_model)
        self._run_name = run_name
        local = tracking_uri is None and not os.environ.get("MLFLOW_TRACKING_URI")
        root = Path(save_dir).resolve()
        self.tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"
        self._artifact_location = artifact_location or ((root / "mlartifacts").as_uri() if local else None)
        self._tags = dict(tags or {})
        self._run_id = run_id
        self._resumed = run_id is not None
        self._client: MlflowClient | None = None

    @property
    def run_id(self) -> str | None:
        """The MLflow run id (waits for the run to be created if it is being created now)."""
        if self._opened:
            self.save()
        return self._run_id

    @property
    def experiment(self) -> MlflowClient:
        """The ``MlflowClient`` of the tracking store (waits for the queued writes; starts the run if needed)."""
        if not self._opened:
            self._submit(lambda: None)
        self.save()
        assert self._client is not None
        return self._client

    @override
    def _open(self) -> None:
        from mlflow.tracking import MlflowClient

        self._client = client = MlflowClient(tracking_uri=self.tracking_uri)
        if self._run_id is not None:
            client.update_run(self._run_id, status="RUNNING")
            self._resumed = True
            return
        experiment = client.get_experiment_by_name(self.name)
        experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(
            self.name, artifact_location=self._artifact_location)
        run = client.create_run(experiment_id, run_name=self._run_name, tags=self._tags)
        self._run_id = run.info.run_id

    @override
    def _write_metrics(self, rows: list[tuple[dict[str, float], int]]) -> None:
        from mlflow.entities import Metric

        assert self._client is not None and self._run_id is not None
        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for metrics, step in rows for k, v in metrics.items()]
        for start in range(0, len(items), 1000):  # MLflow's limit per log_batch
            self._client.log_batch(self._run_id, metrics=items[start:start + 1000])

    @override
    def _write_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        assert self._client is not None and self._run_id is not None
        flat = _flatten(params)
        if self._resumed:  # MLflow parameters are write-once: a resumed run logs only new ones
            existing = self._client.get_run(self._run_id).data.params
            changed = sorted(k for k, v in flat.items() if k in existing and existing[k] != v)
            if changed:
                warnings.warn(f"MLflow run {self._run_id} already has parameters {changed} with other values; "
                              f"MLflow keeps the first values.", UserWarning, stacklevel=1)
            flat = {k: v for k, v in flat.items() if k not in existing}
        items = [Param(k, v) for k, v in flat.items()]
        for start in range(0, len(items), 100):
            self._client.log_batch(self._run_id, params=items[start:start + 100])

    @override
    def _write_artifact(self, path: Path) -> None:
        assert self._client is not None and self._run_id is not None
        if path.is_dir():
            self._client.log_artifacts(self._run_id, str(path), f"checkpoints/{path.name}")
        else:
            self._client.log_artifact(self._run_id, str(path), "checkpoints")

    @override
    def _close(self, status: str) -> None:
        if self._client is not None and self._run_id is not None:
            self._client.set_terminated(self._run_id, _END[status])

    @override
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "run_id": self.run_id}

    @override
    def resume(self, state: dict[str, Any], *, step: int) -> None:
        super().resume(state, step=step)
        if state.get("run_id"):
            self._run_id = str(state["run_id"])
            self._resumed = True

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_client": None}
