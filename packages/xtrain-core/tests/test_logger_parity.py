"""The loggers against Lightning 2.6's: hparams files merged across calls, TensorBoard's hp_metric, graph, prefix and
sub_dir, CSV's buffered rows and experiment writer, ``str`` directories, one W&B run for fit and test, ``watch``,
and MLflow's name/version/run id and context tags. Each library is the real one, read back from what it wrote."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from test_trackers import wandb_records
from xtrain.core import CSVLogger, Trainer
from xtrain.core.testing import TinyClassifier, tiny_loaders


def _fit_and_test(logger: Any, *, max_epochs: int = 1, test: bool = False, **kwargs: Any) -> Trainer:
    train, val = tiny_loaders(n=64)
    kwargs.setdefault("enable_checkpointing", False)
    trainer = Trainer(max_epochs=max_epochs, logger=logger, log_every_n_steps=1, enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=0, **kwargs)
    module = TinyClassifier(lr=0.05)
    trainer.fit(module, train, val)
    if test:
        trainer.test(module, val, verbose=False)
    return trainer


def _yaml(path: Path) -> dict[str, Any]:
    yaml = pytest.importorskip("yaml")
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def _tb_accumulator(log_dir: str) -> Any:
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = event_accumulator.EventAccumulator(log_dir, size_guidance={"scalars": 0})
    acc.Reload()
    return acc


# -- 1. hyperparameters merged across calls ------------------------------------------------------------------------
def test_csv_hparams_files_merge_every_call_later_values_winning(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    logger.log_hyperparams({"extra_hp": 7, "lr": 1.0})
    _fit_and_test(logger)  # fit logs the module's lr=0.05, features=16, ...
    for loaded in (_yaml(Path(logger.log_dir) / "hparams.yaml"),
                   json.loads((Path(logger.log_dir) / "hparams.json").read_text())):
        assert loaded["extra_hp"] == 7 and loaded["lr"] == 0.05 and loaded["features"] == 16


def test_tensorboard_hparams_yaml_merges_every_call(tmp_path: Path) -> None:
    from xtrain.core.loggers import TensorBoardLogger

    pytest.importorskip("tensorboard")
    logger = TensorBoardLogger(tmp_path)
    logger.log_hyperparams({"extra_hp": 7})
    _fit_and_test(logger)
    loaded = _yaml(Path(logger.log_dir) / "hparams.yaml")
    assert loaded["extra_hp"] == 7 and loaded["lr"] == 0.05


# -- 2. TensorBoard: hp_metric, graph, prefix, sub_dir -------------------------------------------------------------
def _hparams_metric_tags(acc: Any) -> list[str]:
    from tensorboard.plugins.hparams import plugin_data_pb2

    tags = []
    for content in acc.PluginTagToContent("hparams").values():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.WhichOneof("data") == "experiment":
            tags += [info.name.tag for info in data.experiment.metric_infos]
    return tags


@pytest.mark.parametrize("default_hp_metric", [True, False])
def test_tensorboard_default_hp_metric_gives_the_hparams_tab_a_metric(tmp_path: Path, default_hp_metric: bool) -> None:
    from xtrain.core.loggers import TensorBoardLogger

    pytest.importorskip("tensorboard")
    logger = TensorBoardLogger(tmp_path, default_hp_metric=default_hp_metric)
    logger.log_hyperparams({"lr": 0.1, "layers": 2})
    logger.finalize("success")
    acc = _tb_accumulator(logger.log_dir)
    if default_hp_metric:
        assert [(e.step, e.value) for e in acc.Scalars("hp_metric")] == [(0, -1.0)]
        assert _hparams_metric_tags(acc) == ["hp_metric"]
    else:
        assert "hp_metric" not in acc.Tags()["scalars"] and _hparams_metric_tags(acc) == []


def test_tensorboard_prefix_and_sub_dir(tmp_path: Path) -> None:
    from xtrain.core.loggers import TensorBoardLogger

    pytest.importorskip("tensorboard")
    logger = TensorBoardLogger(tmp_path, "exp", 3, prefix="train", sub_dir="inner")
    assert logger.log_dir == str(tmp_path / "exp" / "version_3" / "inner") and logger.sub_dir == "inner"
    logger.log_metrics({"loss": 0.5}, 2)
    logger.finalize("success")
    acc = _tb_accumulator(logger.log_dir)
    assert [(e.step, e.value) for e in acc.Scalars("train-loss")] == [(2, 0.5)]


class _WithExample(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.example_input_array = torch.zeros(2, 16)


def test_tensorboard_log_graph_writes_the_traced_module(tmp_path: Path) -> None:
    from xtrain.core.loggers import TensorBoardLogger

    pytest.importorskip("tensorboard")
    logger = TensorBoardLogger(tmp_path, version=0, log_graph=True)
    module = _WithExample()
    logger.log_graph(module)
    assert module.training, "the module is left in the mode it was in"
    logger.finalize("success")
    graph = _tb_accumulator(logger.log_dir).Graph()
    assert any("Linear" in node.op or "linear" in node.name.lower() for node in graph.node)

    off = TensorBoardLogger(tmp_path, version=1)  # log_graph=False (the default): nothing is traced
    off.log_graph(module)
    off.log_metrics({"x": 1.0}, 1)
    off.finalize("success")
    with pytest.raises(ValueError):
        _tb_accumulator(off.log_dir).Graph()
    with pytest.warns(UserWarning, match="example_input_array"):
        TensorBoardLogger(tmp_path, version=2, log_graph=True).log_graph(TinyClassifier())


# -- 3. CSV: buffered rows, prefix, experiment writer --------------------------------------------------------------
def test_csv_flush_logs_every_n_steps_buffers_rows_until_the_nth_step(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, version=0, flush_logs_every_n_steps=4, prefix="p")
    for step in range(3):
        logger.log_metrics({"x": float(step)}, step)
    assert not Path(logger.metrics_file).exists(), "steps 0-2 are still buffered"
    logger.log_metrics({"x": 3.0}, 3)  # the 4th step: written, as Lightning's (step + 1) % n == 0
    assert logger.metrics_file.read_text().splitlines() == ["p-x,step", "0.0,0", "1.0,1", "2.0,2", "3.0,3"]
    logger.log_metrics({"x": 4.0}, 4)
    assert len(logger.metrics_file.read_text().splitlines()) == 5
    assert logger.state_dict()["rows"] == 5 and len(logger.metrics_file.read_text().splitlines()) == 6, \
        "a checkpoint's row count is what the file holds"
    logger.log_metrics({"x": 5.0}, 5)
    logger.finalize("success")
    assert logger.metrics_file.read_text().splitlines()[-1] == "5.0,5"


def test_csv_experiment_is_a_writer_as_lightnings(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, version=0, prefix="p")
    writer = logger.experiment
    assert writer.log_dir == logger.log_dir and writer.metrics_file_path == os.path.join(logger.log_dir,
                                                                                         "metrics.csv")
    writer.log_metrics({"acc": 0.5}, 7)  # the writer adds no prefix (Lightning's does not either)
    writer.log_hparams({"a": 1})
    writer.log_hparams({"b": 2})
    writer.save()
    assert Path(writer.metrics_file_path).read_text().splitlines() == ["acc,step", "0.5,7"]
    assert _yaml(Path(logger.log_dir) / "hparams.yaml") == {"a": 1, "b": 2}


# -- 7. directories are str ----------------------------------------------------------------------------------------
def test_directories_are_str_and_keep_path_operations(tmp_path: Path) -> None:
    from xtrain.core.loggers import TensorBoardLogger

    for logger in (CSVLogger(tmp_path, "exp", 2), TensorBoardLogger(tmp_path, "exp", 2)):
        for value in (logger.log_dir, logger.save_dir, logger.root_dir):
            assert isinstance(value, str)
        assert logger.log_dir + "/x" == f"{tmp_path}/exp/version_2/x"  # Lightning scripts build paths so
        assert logger.root_dir == os.path.join(str(tmp_path), "exp")
        assert logger.log_dir / "x" == tmp_path / "exp" / "version_2" / "x"  # xtrain 1.x scripts so
        assert logger.log_dir.parent == tmp_path / "exp" and logger.log_dir == tmp_path / "exp" / "version_2"
        copied = pickle.loads(pickle.dumps(logger.log_dir))
        assert type(copied) is str and copied == f"{tmp_path}/exp/version_2"


# -- 5. W&B --------------------------------------------------------------------------------------------------------
@pytest.fixture
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    wandb = pytest.importorskip("wandb")
    for var in ("WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb_home" / var.lower()))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")
    # W&B reads the environment once per process, at its first run: after another test's run (test_trackers.py, in
    # the same worker) WANDB_MODE would go unseen and the run would try to log in.
    wandb.teardown()
    return tmp_path


def _finished_records(run_file: Path) -> list[Any]:
    deadline = time.monotonic() + 60
    while True:  # finish() returns before W&B's service process has written the exit record
        records = wandb_records(run_file)
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        assert time.monotonic() < deadline, "the W&B run file never got its exit record"
        time.sleep(0.2)


def _history_keys(records: list[Any]) -> set[str]:
    return {item.key or "/".join(item.nested_key) for r in records if r.WhichOneof("record_type") == "history"
            for item in r.history.item}


def test_wandb_fit_then_test_is_one_run(offline_wandb: Path) -> None:
    from xtrain.core.loggers import WandbLogger

    logger = WandbLogger(save_dir=offline_wandb, project="proj", prefix="p", job_type="train", notes="parity",
                         tags=["t1"])
    _fit_and_test(logger, test=True)
    logger.finish()
    runs = sorted((offline_wandb / "wandb").glob("offline-run-*"))
    assert [r.name.endswith(logger.version) for r in runs] == [True], "fit and test share one run directory"
    assert (offline_wandb / "wandb" / "latest-run").resolve() == runs[0].resolve()
    records = _finished_records(runs[0] / f"run-{logger.version}.wandb")
    assert {"p-train_loss", "p-val_loss", "p-test_loss"} <= _history_keys(records)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.job_type == "train" and run.notes == "parity" and list(run.tags) == ["t1"]
    config = {item.key: json.loads(item.value_json) for r in records if r.WhichOneof("record_type") == "config"
              for item in r.config.update}
    assert config["lr"] == 0.05


def test_wandb_run_left_open_ends_cleanly_at_exit(offline_wandb: Path) -> None:
    script = textwrap.dedent(f"""
        from xtrain.core.loggers import WandbLogger
        logger = WandbLogger(save_dir={str(offline_wandb)!r}, project="proj")
        logger.log_metrics({{"x": 1.0}}, 1)
        logger.finalize("success")  # a stage ended: the run stays open until the interpreter exits
        print(logger.version)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180,
                          env=os.environ.copy(), check=True)
    version = done.stdout.strip().splitlines()[-1]
    (run_file,) = (offline_wandb / "wandb").glob(f"offline-run-*-{version}/run-{version}.wandb")
    records = _finished_records(run_file)
    (exit_record,) = [r.exit for r in records if r.WhichOneof("record_type") == "exit"]
    assert exit_record.exit_code == 0 and "x" in _history_keys(records)


def test_wandb_watch_and_checkpoint_name(offline_wandb: Path) -> None:
    from xtrain.core.callbacks import ModelCheckpoint
    from xtrain.core.loggers import WandbLogger

    logger = WandbLogger(save_dir=offline_wandb, project="proj", log_model="all", checkpoint_name="tiny-model")
    model = torch.nn.Linear(2, 2)
    logger.watch(model, log="all", log_freq=1)
    assert any(p._backward_hooks for p in model.parameters()) or model._forward_hooks, "W&B hooks are in place"
    logger.unwatch(model)
    train, val = tiny_loaders(n=32)
    Trainer(max_epochs=1, logger=logger, enable_progress_bar=False, enable_model_summary=False,
            num_sanity_val_steps=0, callbacks=[ModelCheckpoint(save_top_k=1, monitor="val_loss")]).fit(
        TinyClassifier(), train, val)
    logger.finish()
    (run_file,) = (offline_wandb / "wandb").glob(f"offline-run-*-{logger.version}/run-{logger.version}.wandb")
    names = {r.artifact.name for r in _finished_records(run_file) if r.WhichOneof("record_type") == "artifact"}
    assert names == {"tiny-model"}


# -- 6. MLflow -----------------------------------------------------------------------------------------------------
@pytest.fixture
def mlflow_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_mlflow_name_version_run_id_and_context_tags(tmp_path: Path, mlflow_uri: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    from xtrain.core.loggers import MLFlowLogger

    sent: list[dict[str, Any]] = []
    original = MlflowClient.log_batch

    def log_batch(self: Any, run_id: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("metrics") or kwargs.get("params"):
            sent.append(kwargs)
        return original(self, run_id, *args, **kwargs)

    logger = MLFlowLogger(save_dir=tmp_path, experiment_name="parity", tracking_uri=mlflow_uri, prefix="p", synchronous=True)
    monkeypatch.setattr(MlflowClient, "log_batch", log_batch)  # after: the logger reads its signature
    run_id = logger.run_id  # created on first access, as Lightning's
    assert run_id is not None
    client = MlflowClient(tracking_uri=mlflow_uri)
    experiment = client.get_experiment_by_name("parity")
    assert experiment is not None
    assert logger.experiment_id == experiment.experiment_id == logger.name
    assert logger.version == run_id
    assert logger.log_dir == os.path.join(str(tmp_path), experiment.experiment_id, run_id)
    run = client.get_run(run_id)
    assert run.info.experiment_id == experiment.experiment_id
    assert {"mlflow.user", "mlflow.source.name", "mlflow.source.type"} <= set(run.data.tags)
    _fit_and_test(logger, test=True)
    assert logger.run_id == run_id and len(client.search_runs([experiment.experiment_id])) == 1
    history = client.get_metric_history(run_id, "p-train_loss")
    assert len(history) == 4 and client.get_metric_history(run_id, "p-test_loss")
    assert sent and all(kwargs.get("synchronous") is True for kwargs in sent)


def test_mlflow_resume_from_last_continues_the_run_without_a_stray_one(tmp_path: Path, mlflow_uri: str) -> None:
    """``ckpt_path="last"`` finds the checkpoints under ``save_dir/<experiment id>/*/checkpoints`` (``name`` is the
    experiment id) and continues the checkpoint's run; asking for the experiment id creates no run."""
    from mlflow.tracking import MlflowClient

    from xtrain.core.loggers import MLFlowLogger

    first = MLFlowLogger(save_dir=tmp_path, experiment_name="again", tracking_uri=mlflow_uri)
    _fit_and_test(first, enable_checkpointing=True)
    again = MLFlowLogger(save_dir=tmp_path, experiment_name="again", tracking_uri=mlflow_uri)
    train, val = tiny_loaders(n=64)
    Trainer(max_epochs=2, logger=again, log_every_n_steps=1, enable_progress_bar=False, enable_model_summary=False,
            num_sanity_val_steps=0).fit(TinyClassifier(lr=0.05), train, val, ckpt_path="last")
    client = MlflowClient(tracking_uri=mlflow_uri)
    assert again.run_id == first.run_id
    assert len(client.search_runs([again.experiment_id])) == 1
    steps = sorted(m.step for m in client.get_metric_history(again.run_id, "train_loss"))  # type: ignore[arg-type]
    assert steps == list(range(8))


def test_wandb_rows_hold_trainer_global_step_as_the_x_axis(offline_wandb: Path) -> None:
    """Lightning's WandbLogger writes ``trainer/global_step`` in every row and makes it every metric's step metric;
    dashboards built on Lightning runs plot against it."""
    from xtrain.core.loggers import WandbLogger

    logger = WandbLogger(save_dir=offline_wandb, project="proj")
    _fit_and_test(logger, max_epochs=2)
    logger.finish()
    (run_dir,) = (offline_wandb / "wandb").glob("offline-run-*")
    records = _finished_records(run_dir / f"run-{logger.version}.wandb")
    rows = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item} for r in records
            if r.WhichOneof("record_type") == "history"]
    train_rows = [row for row in rows if "train_loss" in row]
    assert len(train_rows) == 8  # 4 steps an epoch, logged every step
    assert [row["trainer/global_step"] for row in train_rows] == list(range(8))  # Lightning's row steps
    assert [row["_step"] for row in rows] == list(range(len(rows))), "W&B's _step counts the rows"
    step_metric = {r.metric.glob_name or r.metric.name: r.metric.step_metric for r in records
                   if r.WhichOneof("record_type") == "metric"}
    assert step_metric.get("*") == "trainer/global_step", step_metric


def test_csv_columns_are_in_alphabetical_order_as_lightnings(tmp_path: Path) -> None:
    """Lightning's CSV writer sorts its columns (scripts written against its files may read them by position)."""
    _fit_and_test(CSVLogger(tmp_path), max_epochs=2, test=True)
    (metrics,) = tmp_path.rglob("metrics.csv")
    header = metrics.read_text().splitlines()[0].split(",")
    assert {"epoch", "step", "train_loss", "val_loss", "test_loss"} <= set(header)
    assert header == sorted(header), header


def test_tensorboard_logger_passes_summary_writer_keywords_as_lightnings(tmp_path: Path) -> None:
    """Lightning's ``TensorBoardLogger(..., flush_secs=5, filename_suffix=".x")`` hands them to ``SummaryWriter``."""
    pytest.importorskip("tensorboard")
    from xtrain.core import ConfigError
    from xtrain.core.loggers import TensorBoardLogger

    logger = TensorBoardLogger(tmp_path, "exp", flush_secs=5, max_queue=3, filename_suffix=".run1")
    logger.log_metrics({"x": 1.0}, 0)
    logger.finalize("success")
    (events,) = Path(logger.log_dir).glob("events.out.tfevents.*")
    assert events.name.endswith(".run1")
    with pytest.raises(ConfigError, match=r"flush_sec.*flush_secs"):
        TensorBoardLogger(tmp_path, flush_sec=5)
