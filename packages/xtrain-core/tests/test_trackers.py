"""WandbLogger (offline, the run file read back) and MLFlowLogger (a real SQLite store read through MlflowClient)."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import ConfigError, Trainer
from xtrain.core.callbacks import ModelCheckpoint
from xtrain.core.testing.models import TinyClassifier, tiny_loaders

pytest.importorskip("wandb")
pytest.importorskip("mlflow")


@pytest.fixture(autouse=True)
def _quiet_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb_home" / var.lower()))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite store for the module's tests (creating its tables takes seconds); each test its own experiment."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).search_experiments()
    return uri


def wandb_records(run_file: Path) -> list[Any]:
    """The records of a ``.wandb`` run file: W&B's LevelDB-style log of ``wandb_internal_pb2.Record`` messages.

    (wandb no longer ships a Python reader; the format is a 7-byte file header, then 32 KiB blocks of chunks, each
    with a 7-byte header ``crc32 u32, length u16, type u8``: 1 full, 2 first, 3 middle, 4 last.)
    """
    from wandb.proto import wandb_internal_pb2 as pb

    raw = run_file.read_bytes()
    assert raw[:4] == b":W&B", raw[:7]
    block, pos, pending, out = 32768, 7, b"", []
    while pos + 7 <= len(raw):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        data, pos = raw[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 2):
            pending = data
        elif kind in (3, 4):
            pending += data
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out


def wandb_run(save_dir: Path, run_id: str) -> dict[str, Any]:
    """Run id, config, history (rows merged by trainer/global_step; ``rows``: each row as logged, in order) and
    artifacts of every offline attempt of run ``run_id``."""
    files = sorted((save_dir / "wandb").glob(f"offline-run-*-{run_id}*/run-{run_id}.wandb"))
    assert files, list((save_dir / "wandb").glob("*"))
    deadline = time.monotonic() + 60
    # wandb.finish() returns before W&B's service process has written the whole file: wait for its exit record.
    while not all(any(r.WhichOneof("record_type") == "exit" for r in wandb_records(f)) for f in files):
        assert time.monotonic() < deadline, "the W&B run file never got its exit record"
        time.sleep(0.2)
    found: dict[str, Any] = {"attempts": len(files), "history": {}, "rows": [], "config": {}, "artifacts": [],
                             "ids": set()}
    for file in files:
        for record in wandb_records(file):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                found["ids"].add(record.run.run_id)
                for item in record.run.config.update:
                    found["config"][item.key] = json.loads(item.value_json)
            elif kind == "config":
                for item in record.config.update:
                    found["config"][item.key] = json.loads(item.value_json)
            elif kind == "history":
                row = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
                found["rows"].append(row)
                found["history"].setdefault(row.get("trainer/global_step", row["_step"]), {}).update(row)
            elif kind == "artifact":
                found["artifacts"].append((record.artifact.name, record.artifact.type,
                                           [c.path for c in record.artifact.manifest.contents]))
    return found


def _fit(tmp_path: Path, logger: Any, **kwargs: Any) -> tuple[Trainer, TinyClassifier]:
    train, val = tiny_loaders(n=64)
    module = TinyClassifier(lr=0.05)
    ckpt_path = kwargs.pop("ckpt_path", None)
    trainer = Trainer(max_epochs=kwargs.pop("max_epochs", 2), logger=logger, log_every_n_steps=1,
                      default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False,
                      num_sanity_val_steps=0, **kwargs)
    trainer.fit(module, train, val, ckpt_path=ckpt_path)
    return trainer, module


class Crash(ModelCheckpoint):
    """Saves every 2 steps (``last.ckpt``) and raises at step ``at``: a run that dies mid-training."""

    def __init__(self, at: int) -> None:
        super().__init__(every_n_train_steps=2, save_last=True, save_top_k=0)
        self.at = at

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.at:
            raise RuntimeError("simulated crash")


def test_wandb_offline_run_holds_params_metrics_by_step_and_checkpoints(tmp_path: Path) -> None:
    from xtrain.core.loggers import WandbLogger

    logger = WandbLogger(save_dir=tmp_path, project="proj", offline=True, log_model="all")
    trainer, _ = _fit(tmp_path, logger)
    logger.finish()  # the run stays open after a stage (Lightning's: one run for fit and test) until finish or exit
    run = wandb_run(tmp_path, logger.version)
    assert run["ids"] == {logger.version}
    assert run["config"]["lr"] == 0.05 and run["config"]["features"] == 16
    assert sorted(run["history"]) == list(range(8))  # 64 samples / 16 = 4 steps per epoch, logged every step
    assert run["history"][7]["val_loss"] == pytest.approx(trainer.logged_metrics["val_loss"])
    assert all("train_loss" in row for row in run["history"].values())
    assert ("model-" + logger.version, "model", ["last.ckpt"]) in run["artifacts"] or any(
        name == f"model-{logger.version}" and kind == "model" for name, kind, _ in run["artifacts"])
    uploaded = {path for _, _, paths in run["artifacts"] for path in paths}
    assert {"epoch=1-step=8.ckpt", "last.ckpt"} <= uploaded
    assert Path(trainer.checkpoint_callback.best_model_path).parent == tmp_path / "proj" / logger.version / \
        "checkpoints"  # type: ignore[union-attr]


def test_wandb_keeps_every_validation_step_value_and_fits_values_after_validate(tmp_path: Path) -> None:
    """Values logged on_step in validation_step come on a count of validation batches (behind the global step, as in
    Lightning). Each logging call is a W&B row of its own: passing the trainer's step to W&B merged rows that share
    one, so only each validation's last batch survived, and a validate() after fit replaced fit's last values (found
    by an outside trial of a Lightning project with W&B)."""
    from torch.utils.data import DataLoader

    from xtrain.core.loggers import WandbLogger
    from xtrain.core.testing import tiny_dataset

    class StepLogged(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            super().validation_step(batch, batch_idx)
            self.log("val_batch", float(10 * self.current_epoch + batch_idx), on_step=True, on_epoch=False)

    logger = WandbLogger(save_dir=tmp_path, project="proj", offline=True)
    train, val = tiny_loaders(n=64)[0], DataLoader(tiny_dataset(32, seed=1), batch_size=8)  # 4 batches
    trainer = Trainer(max_epochs=2, logger=logger, log_every_n_steps=1, default_root_dir=tmp_path,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    model = StepLogged()
    trainer.fit(model, train, val)
    fit_val_loss = trainer.logged_metrics["val_loss"]
    trainer.validate(model, val)
    logger.finish()
    run = wandb_run(tmp_path, logger.version)
    logged = [row["val_batch"] for row in run["rows"] if "val_batch" in row]
    assert logged == [0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0, 20.0, 21.0, 22.0, 23.0], logged
    val_losses = [row["val_loss"] for row in run["rows"] if "val_loss" in row]
    assert len(val_losses) == 3 and val_losses[1] == pytest.approx(fit_val_loss), val_losses
    assert [row["trainer/global_step"] for row in run["rows"] if "train_loss" in row] == list(range(8))


def test_wandb_resume_continues_the_same_run(tmp_path: Path) -> None:
    from xtrain.core.loggers import WandbLogger

    first = WandbLogger(save_dir=tmp_path, project="proj", offline=True)
    with pytest.raises(RuntimeError, match="simulated crash"):
        _fit(tmp_path, first, callbacks=[Crash(at=5)], max_epochs=3)
    again = WandbLogger(save_dir=tmp_path, project="proj", offline=True)
    ckpt = tmp_path / "proj" / first.version / "checkpoints" / "last.ckpt"
    _fit(tmp_path, again, callbacks=[Crash(at=-1)], max_epochs=3, ckpt_path=str(ckpt))
    assert again.version == first.version
    again.finish()
    run = wandb_run(tmp_path, first.version)
    assert run["attempts"] == 2 and run["ids"] == {first.version}
    assert max(run["history"]) == 11 and {3, 4, 5, 11} <= set(run["history"])


def test_mlflow_sqlite_store_holds_run_params_metrics_and_artifacts(tmp_path: Path, mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    from xtrain.core.loggers import MLFlowLogger

    logger = MLFlowLogger(save_dir=tmp_path, experiment_name="exp1", run_name="first", log_model=True, tags={"team": "x"},
                          tracking_uri=mlflow_uri, artifact_location=(tmp_path / "artifacts").as_uri())
    trainer, _ = _fit(tmp_path, logger)
    client = MlflowClient(tracking_uri=mlflow_uri)
    run = client.get_run(logger.run_id)  # type: ignore[arg-type]
    assert run.info.status == "FINISHED" and run.info.run_name == "first" and run.data.tags["team"] == "x"
    assert run.data.params["lr"] == "0.05" and run.data.params["classes"] == "4"
    history = client.get_metric_history(run.info.run_id, "train_loss")
    assert sorted(m.step for m in history) == list(range(8))
    val = client.get_metric_history(run.info.run_id, "val_loss")
    assert [m.step for m in val] == [3, 7] and val[-1].value == pytest.approx(trainer.logged_metrics["val_loss"])
    names = [f.path for f in client.list_artifacts(run.info.run_id, "checkpoints")]
    assert names == ["checkpoints/epoch=1-step=8.ckpt", "checkpoints/last.ckpt"]
    local = Path(client.download_artifacts(run.info.run_id, "checkpoints/last.ckpt", str(tmp_path / "dl")))
    assert torch.load(local, weights_only=True)["loops"]["global_step"] == 8


def test_mlflow_resume_after_crash_continues_the_same_run(tmp_path: Path, mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    from xtrain.core.loggers import MLFlowLogger

    first = MLFlowLogger(save_dir=tmp_path, experiment_name="exp2", tracking_uri=mlflow_uri)
    with pytest.raises(RuntimeError, match="simulated crash"):
        _fit(tmp_path, first, callbacks=[Crash(at=5)], max_epochs=3)
    client = MlflowClient(tracking_uri=first.tracking_uri)
    assert client.get_run(first.run_id).info.status == "FAILED"  # type: ignore[arg-type]
    again = MLFlowLogger(save_dir=tmp_path, experiment_name="exp2", tracking_uri=mlflow_uri)
    ckpt = first.log_dir / "checkpoints" / "last.ckpt"
    _fit(tmp_path, again, callbacks=[Crash(at=-1)], max_epochs=3, ckpt_path=str(ckpt))
    assert again.run_id == first.run_id
    assert len(client.search_runs([client.get_experiment_by_name("exp2").experiment_id])) == 1  # type: ignore[union-attr]
    run = client.get_run(first.run_id)  # type: ignore[arg-type]
    assert run.info.status == "FINISHED"
    steps = sorted({m.step for m in client.get_metric_history(run.info.run_id, "train_loss")})
    assert steps == list(range(12))


def test_tracker_options_are_checked_before_anything_runs(tmp_path: Path) -> None:
    from xtrain.core.loggers import MLFlowLogger, WandbLogger

    with pytest.raises(ConfigError, match="log_model"):
        WandbLogger(save_dir=tmp_path, log_model="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="log_model"):
        MLFlowLogger(save_dir=tmp_path, log_model=2)  # type: ignore[arg-type]


def test_a_failing_tracker_is_reported_not_silent(tmp_path: Path, mlflow_uri: str) -> None:
    from xtrain.core.loggers import MLFlowLogger

    logger = MLFlowLogger(save_dir=tmp_path, run_id="no-such-run", tracking_uri=mlflow_uri)
    logger.log_metrics({"x": 1.0}, step=1)
    with pytest.raises(Exception, match="no-such-run"):
        logger.save()


def test_mlflow_default_store_is_sqlite_beside_the_logs(tmp_path: Path) -> None:
    from xtrain.core.loggers import MLFlowLogger

    logger = MLFlowLogger(save_dir=tmp_path / "runs")
    assert logger.tracking_uri == f"sqlite:///{(tmp_path / 'runs').resolve() / 'mlflow.db'}"


class SlowTracker:
    """A test double of a tracker client that takes 0.3 s per call (what a remote service can cost)."""

    def __init__(self) -> None:
        self.rows: list[tuple[dict[str, float], int]] = []
        self.calls = 0

    def send(self, rows: list[tuple[dict[str, float], int]]) -> None:
        time.sleep(0.3)
        self.calls += 1
        self.rows += rows


def test_a_slow_tracker_never_blocks_the_caller_and_gets_batches(tmp_path: Path) -> None:
    from xtrain.core.loggers import TrackerLogger

    client = SlowTracker()

    class Slow(TrackerLogger):
        flush_interval = 0.2

        def _open(self) -> None:
            time.sleep(0.3)

        def _write_metrics(self, rows: list[tuple[dict[str, float], int]]) -> None:
            client.send(rows)

        def _write_params(self, params: dict[str, Any]) -> None: ...
        def _write_artifact(self, path: Path) -> None: ...
        def _close(self, status: str) -> None: ...

    logger = Slow(tmp_path)
    start = time.perf_counter()
    for step in range(200):
        logger.log_metrics({"loss": float(step)}, step)
    assert time.perf_counter() - start < 0.25  # 200 calls; sending them one by one would take 60 s
    logger.finalize("success")
    assert [step for _, step in client.rows] == list(range(200))
    assert client.calls < 20


def test_experiment_on_other_ranks_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``self.logger.experiment.log(...)`` in training_step runs on every rank: on rank 1 it started a second W&B run
    with the same id and wrote a second TensorBoard event file (found by an outside trial under ddp). Other ranks
    get an object on which everything does nothing, as Lightning's ``rank_zero_experiment``."""
    from xtrain.core.loggers import MLFlowLogger, TensorBoardLogger, WandbLogger
    from xtrain.core.rank_zero import rank_zero_only

    monkeypatch.setattr(rank_zero_only, "rank", 1)
    loggers = [WandbLogger(save_dir=tmp_path / "wandb", offline=True),
               TensorBoardLogger(save_dir=tmp_path / "tb"),
               MLFlowLogger(save_dir=tmp_path / "mlflow", tracking_uri=f"sqlite:///{tmp_path / 'ml.db'}")]
    for logger in loggers:
        experiment = logger.experiment
        experiment.log({"custom": 1.0})
        experiment.add_scalar("custom", 1.0, 0)
        experiment.log_metric(experiment.run_id, "custom", 1.0)
        assert not experiment and repr(experiment).startswith("NoExperiment")
    assert not [p for p in tmp_path.rglob("*") if p.is_file()], "a rank other than 0 wrote"


def test_wandb_takes_lightnings_dir_and_resume_arguments(tmp_path: Path) -> None:
    """``WandbLogger(dir=...)`` and ``WandbLogger(id=..., resume="allow")`` (Lightning's resume recipe) failed with
    "got multiple values for keyword argument" when the run started, after training (found by an outside trial)."""
    from xtrain.core.loggers import WandbLogger

    logger = WandbLogger(dir=str(tmp_path / "runs"), id="myrun123", resume="allow", offline=True, project="proj")
    assert logger.save_dir == tmp_path / "runs" and logger.version == "myrun123"
    _fit(tmp_path, logger, max_epochs=1)
    logger.finish()
    run = wandb_run(tmp_path / "runs", "myrun123")
    assert run["ids"] == {"myrun123"} and max(run["history"]) == 3


def test_mlflow_metric_names_lose_the_characters_mlflow_refuses(tmp_path: Path, mlflow_uri: str) -> None:
    """``self.log("acc@1", ...)``: MLflow refused the name, and with it every value of that batch and the run (found
    by an outside trial). As Lightning's MLFlowLogger, the characters are removed and a warning says so."""
    from mlflow.tracking import MlflowClient

    from xtrain.core.loggers import MLFlowLogger

    class TopOne(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = super().training_step(batch, batch_idx)
            self.log("acc@1", 0.5)
            return loss

    logger = MLFlowLogger(save_dir=tmp_path, experiment_name="names", tracking_uri=mlflow_uri)
    train, _ = tiny_loaders(n=64)
    with pytest.warns(RuntimeWarning, match="'acc@1' is logged as 'acc1'"):
        Trainer(max_epochs=1, logger=logger, log_every_n_steps=1, default_root_dir=tmp_path,
                enable_progress_bar=False, enable_model_summary=False).fit(TopOne(), train)
    client = MlflowClient(tracking_uri=mlflow_uri)
    run = client.get_run(logger.run_id)  # type: ignore[arg-type]
    assert run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "acc1")] == [0, 1, 2, 3]
    assert len(client.get_metric_history(run.info.run_id, "train_loss")) == 4


def test_wandb_media_methods_of_lightnings_logger(tmp_path: Path) -> None:
    """log_image, log_table, log_text (and log_audio, log_video) of Lightning's WandbLogger were missing: an
    AttributeError in a migrated project (found by an outside trial)."""
    import numpy as np

    from xtrain.core.loggers import WandbLogger

    logger = WandbLogger(save_dir=tmp_path, project="proj", offline=True)
    logger.log_image("samples", [np.zeros((4, 4, 3), dtype=np.uint8)] * 2, step=3, caption=["a", "b"])
    logger.log_table("preds", columns=["x", "y"], data=[[1, 2], [3, 4]])
    logger.log_text("notes", columns=["text"], data=[["hello"]], step=5)
    with pytest.raises(ConfigError, match="caption"):
        logger.log_image("bad", [np.zeros((4, 4, 3), dtype=np.uint8)], caption=["a", "b"])
    logger.finish()
    run = wandb_run(tmp_path, logger.version)
    rows = run["rows"]  # W&B stores a medium's fields as nested keys ("samples/_type")
    assert len(rows) == 3, rows
    assert rows[0]["samples/_type"] == "images/separated" and rows[0]["samples/captions"] == ["a", "b"]
    assert rows[0]["trainer/global_step"] == 3  # a row without a step gets the last one (define_metric step_sync)
    assert rows[1]["preds/_type"] == "table-file" and rows[1]["preds/nrows"] == 2
    assert rows[2]["notes/_type"] == "table-file" and rows[2]["trainer/global_step"] == 5
