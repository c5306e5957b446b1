from __future__ import annotations

import io
import itertools
import pickle
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import (
    ConfigError,
    CSVLogger,
    LearningRateMonitor,
    ModelSummary,
    ProgressBar,
    RichProgressBar,
    TensorBoardLogger,
    Trainer,
)
from xtrain.core.callbacks.model_summary import summarize
from xtrain.core.testing import TinyClassifier, tiny_loaders


def fit(**kwargs: Any) -> Trainer:
    train, val = tiny_loaders()
    trainer = Trainer(enable_checkpointing=False, enable_model_summary=False, **kwargs)
    trainer.fit(TinyClassifier(), train, val)
    return trainer


def test_tensorboard_event_files_hold_the_logged_scalars(tmp_path: Path) -> None:
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    logger = TensorBoardLogger(tmp_path)
    fit(max_epochs=2, logger=logger, log_every_n_steps=2, enable_progress_bar=False,
        callbacks=[LearningRateMonitor("step")])  # the default also logs an unscheduled rate as each epoch starts
    acc = event_accumulator.EventAccumulator(str(logger.log_dir))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train_loss", "val_loss", "val_acc", "lr-SGD"} <= tags
    train = acc.Scalars("train_loss")
    assert [e.step for e in train] == list(range(1, 32, 2))  # Lightning's: the steps before each row's batch
    assert all(e.value > 0 for e in train) and train[-1].value < train[0].value
    assert [e.step for e in acc.Scalars("val_loss")] == [15, 31]
    assert all(e.value == pytest.approx(0.1) for e in acc.Scalars("lr-SGD"))
    assert [e.step for e in acc.Scalars("lr-SGD")] == [e.step for e in train], "on the rows of the step metrics"


def test_event_records_carry_tensorboards_checksums(tmp_path: Path) -> None:
    """The event file's records are checksummed in C (``google-crc32c``, from the tensorboard extra) and TensorBoard's
    own reader, which verifies every checksum, reads them back; a flipped byte is caught."""
    pytest.importorskip("tensorboard")
    google_crc32c = pytest.importorskip("google_crc32c")
    from tensorboard.compat.tensorflow_stub import errors
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c as python_crc32c

    from xtrain.core._internal import event_file

    assert event_file.crc32c is google_crc32c.value
    for data in (b"", b"123456789", bytes(range(256)) * 3):
        assert event_file.crc32c(data) == python_crc32c(data)
    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics({f"m{i}": float(i) for i in range(21)}, step=7)
    logger.finalize("success")
    (path,) = logger.log_dir.glob("events.out.tfevents.*")

    def events(file: Path) -> list[Any]:
        from tensorboard.compat.proto.event_pb2 import Event

        reader, found = PyRecordReader_New(str(file)), []
        while True:
            try:
                reader.GetNext()
            except errors.OutOfRangeError:
                return found
            found.append(Event.FromString(reader.record()))

    written = events(path)
    assert [v.simple_value for v in written[-1].summary.value] == [float(i) for i in range(21)]
    assert written[-1].step == 7
    damaged = bytearray(path.read_bytes())
    damaged[-10] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(errors.DataLossError, match="crc32"):
        events(path)


def test_learning_rate_monitor_logs_the_rate_each_batch_trained_with(tmp_path: Path) -> None:
    """As Lightning: read when the batch starts (a scheduler stepped after a batch shows on the next row), kept in
    ``lrs``; 5 batches an epoch and a frequency-2 step scheduler give Lightning 2.6's measured rates."""
    import csv

    from xtrain.core import CSVLogger

    class Sched(TinyClassifier):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=1.0)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(
                opt, step_size=1, gamma=0.5), "interval": "step", "frequency": 2}}

    monitor = LearningRateMonitor(logging_interval="step")
    logger = CSVLogger(tmp_path)
    trainer = Trainer(max_epochs=2, limit_train_batches=5, log_every_n_steps=1, logger=logger, callbacks=[monitor],
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(Sched(), tiny_loaders()[0])
    expected = [1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125, 0.0625]
    assert monitor.lrs == {"lr-SGD": expected}
    with logger.metrics_file.open(newline="") as f:
        rows = [(int(r["step"]), float(r["lr-SGD"])) for r in csv.DictReader(f) if r.get("lr-SGD")]
    assert rows == list(zip(range(10), expected, strict=True))
    assert trainer.callback_metrics["lr-SGD"].item() == 0.0625


@pytest.mark.parametrize("files_before", [0, 9])
def test_tensorboard_resume_purges_steps_after_the_checkpoint(tmp_path: Path, files_before: int,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``files_before=9``: the process had opened 9 event files, so the two files of this test are its 10th and 11th
    (their names once sorted ".10." before ".9.", and TensorBoard read the resumed events first)."""
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    from xtrain.core._internal import event_file

    monkeypatch.setattr(event_file, "_UIDS", itertools.count(files_before))
    logger = TensorBoardLogger(tmp_path, version=0)
    logger.log_metrics({"x": 1.0}, 1)
    logger.log_metrics({"x": 2.0}, 2)
    logger.log_metrics({"x": 3.0}, 3)
    logger.finalize("failed")
    resumed = TensorBoardLogger(tmp_path)
    resumed.resume({"version": 0}, step=1)
    resumed.log_metrics({"x": 20.0}, 2)
    resumed.finalize("success")
    acc = event_accumulator.EventAccumulator(str(resumed.log_dir))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("x")] == [(1, 1.0), (2, 20.0)]


def test_tensorboard_writes_every_event_into_one_file_without_a_writer_thread(tmp_path: Path) -> None:
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    threads = {t.ident for t in threading.enumerate()}
    logger = TensorBoardLogger(tmp_path, version=0)
    logger.log_metrics({"loss": 0.5, "epoch": 0.0}, 3)
    logger.experiment.add_histogram("weights", torch.arange(10.0), 3)  # SummaryWriter's own API, same file
    assert {t.ident for t in threading.enumerate()} == threads  # nothing woken per logged step
    logger.experiment.flush()  # readable while the run goes on, before finalize
    files = list(logger.log_dir.glob("events.out.tfevents.*"))
    assert len(files) == 1
    acc = event_accumulator.EventAccumulator(str(logger.log_dir))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(3, 0.5)]
    assert [e.step for e in acc.Histograms("weights")] == [3]
    logger.finalize("success")


def test_a_users_own_summary_writer_in_the_log_dir_does_not_truncate_the_loggers_file(tmp_path: Path) -> None:
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    from torch.utils.tensorboard import SummaryWriter

    logger = TensorBoardLogger(tmp_path, version=0)
    logger.log_metrics({"loss": 0.5}, 1)
    mine = SummaryWriter(str(logger.log_dir))  # same process, same second, its own file counter from 0
    mine.add_scalar("extra", 2.0, 1)
    mine.close()
    logger.finalize("success")
    acc = event_accumulator.EventAccumulator(str(logger.log_dir))
    acc.Reload()
    assert [e.value for e in acc.Scalars("loss")] == [0.5]
    assert [e.value for e in acc.Scalars("extra")] == [2.0]


def test_tensorboard_events_reach_the_file_as_they_are_logged(tmp_path: Path) -> None:
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    logger = TensorBoardLogger(tmp_path, version=0)
    logger.log_metrics({"x": 1.0}, 1)
    logger.log_metrics({"x": 2.0}, 2)  # no flush(), no finalize: a SIGKILL here must not lose them
    acc = event_accumulator.EventAccumulator(str(logger.log_dir))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("x")] == [(1, 1.0), (2, 2.0)]
    logger.finalize("success")


def test_csv_rows_reach_the_file_as_they_are_logged_and_survive_pickling(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, version=0)
    logger.log_metrics({"x": 1.0}, 1)
    logger.log_metrics({"x": 2.0}, 2)  # appended through the open file
    assert logger.metrics_file.read_text().splitlines() == ["step,x", "1,1.0", "2,2.0"]
    copy = pickle.loads(pickle.dumps(logger))  # a spawned worker gets the logger without the open file
    logger.finalize("success")
    copy.log_metrics({"x": 3.0}, 3)
    copy.log_metrics({"x": 4.0, "y": 5.0}, 4)  # a new column rewrites the file, then appends again
    copy.log_metrics({"x": 6.0}, 5)
    copy.finalize("success")
    assert logger.metrics_file.read_text().splitlines() == ["step,x,y", "1,1.0,", "2,2.0,", "3,3.0,", "4,4.0,5.0",
                                                            "5,6.0,"]


def test_csv_logger_resume_keeps_exactly_the_rows_before_the_checkpoint(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, version=0)
    for step in (1, 2, 3):
        logger.log_metrics({"x": float(step)}, step)
    state = {"version": 0, "rows": 2}
    resumed = CSVLogger(tmp_path)
    resumed.resume(state, step=2)
    resumed.log_metrics({"x": 30.0, "y": 1.0}, 3)
    assert resumed.metrics_file.read_text().splitlines() == ["step,x,y", "1,1.0,", "2,2.0,", "3,30.0,1.0"]


def test_plain_progress_bar_prints_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    fit(max_epochs=2, logger=False, callbacks=[ProgressBar(stream=stream)])
    lines = stream.getvalue().splitlines()
    epoch_lines = [line for line in lines if line.startswith("Epoch ")]
    assert len(epoch_lines) == 2 and "\r" not in stream.getvalue()
    assert epoch_lines[-1].startswith("Epoch 1/1 16/16 step 32 [") and "train_loss=" in epoch_lines[-1]
    assert any(line.startswith("Validation (step 16): val_loss=") for line in lines)


def test_rich_progress_bar_draws_epoch_step_rate_eta_and_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rich")
    monkeypatch.setenv("COLUMNS", "200")
    stream = io.StringIO()
    fit(max_epochs=1, logger=False, callbacks=[RichProgressBar(stream=stream, force_terminal=True,
                                                               refresh_interval=0.0)])
    out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    assert "Epoch 0/0 step 16" in out and "16/16" in out and "it/s" in out and "train_loss=" in out
    assert "Validation (step 16): val_loss=" in out


def test_rich_progress_bar_degrades_to_plain_lines() -> None:
    pytest.importorskip("rich")
    stream = io.StringIO()
    fit(max_epochs=1, logger=False, callbacks=[RichProgressBar(stream=stream)])
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("Validation (step 16)") and lines[1].startswith("Epoch 0/0 16/16 step 16")
    assert "\x1b[" not in stream.getvalue()


def test_learning_rate_monitor_names() -> None:
    module = TinyClassifier()
    a = torch.optim.SGD([{"params": [module.net[0].weight]}, {"params": [module.net[0].bias], "lr": 0.5}], lr=0.1,
                        momentum=0.9)
    b = torch.optim.SGD(module.net[3].parameters(), lr=0.2)

    class FakeTrainer:
        optimizers = [a, b]

    values = LearningRateMonitor(log_momentum=True).values(FakeTrainer())  # type: ignore[arg-type]
    assert values == {"lr-SGD/pg1": 0.1, "lr-SGD/pg2": 0.5, "lr-SGD/pg1-momentum": 0.9, "lr-SGD/pg2-momentum": 0.9,
                      "lr-SGD-1": 0.2, "lr-SGD-1-momentum": 0.0}
    named = torch.optim.AdamW([{"params": [module.net[0].weight], "name": "backbone"},
                               {"params": [module.net[0].bias], "name": "head"}], lr=0.3, weight_decay=0.01)

    class Named:
        optimizers = [named]

    values = LearningRateMonitor(log_momentum=True, log_weight_decay=True).values(Named())  # type: ignore[arg-type]
    assert values == {"lr-AdamW/backbone": 0.3, "lr-AdamW/backbone-momentum": 0.9,
                      "lr-AdamW/backbone-weight_decay": 0.01, "lr-AdamW/head": 0.3, "lr-AdamW/head-momentum": 0.9,
                      "lr-AdamW/head-weight_decay": 0.01}
    twice = torch.optim.SGD([{"params": [module.net[0].weight], "name": "x"},
                             {"params": [module.net[0].bias], "name": "x"}], lr=0.1)

    class Twice:
        optimizers = [twice]

    with pytest.raises(ConfigError, match="same 'name'"):
        LearningRateMonitor().values(Twice())  # type: ignore[arg-type]


def test_learning_rate_monitor_follows_each_schedulers_interval_and_name(tmp_path: Path) -> None:
    """Lightning's default ``logging_interval=None``: a per-epoch scheduler once an epoch, a per-step one with the
    step metrics, both under the scheduler's ``"name"`` when it has one (xtrain logged every rate at every logging
    step, as ``lr-<Optimizer>``, and refused ``None``)."""
    import csv

    from xtrain.core import CSVLogger

    class Scheduled(TinyClassifier):
        def __init__(self, interval: str, name: str | None) -> None:
            super().__init__()
            self.interval, self.name = interval, name

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=1.0)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": self.interval,
                                                       **({"name": self.name} if self.name else {})}}

    def run(interval: str, name: str | None) -> tuple[LearningRateMonitor, list[dict[str, str]]]:
        monitor = LearningRateMonitor()
        logger = CSVLogger(tmp_path / interval)
        trainer = Trainer(max_epochs=3, limit_train_batches=3, log_every_n_steps=2, logger=logger,
                          callbacks=[monitor], enable_progress_bar=False, enable_model_summary=False,
                          enable_checkpointing=False)
        trainer.fit(Scheduled(interval, name), tiny_loaders()[0])
        with logger.metrics_file.open(newline="") as f:
            return monitor, list(csv.DictReader(f))

    monitor, rows = run("epoch", None)  # once an epoch, at its start
    assert monitor.lrs == {"lr-SGD": [1.0, 0.5, 0.25]}
    assert [(int(r["step"]), float(r["lr-SGD"])) for r in rows if r.get("lr-SGD")] == [(0, 1.0), (3, 0.5), (6, 0.25)]
    monitor, rows = run("step", "fast")  # with the step metrics, under the scheduler's name
    assert monitor.lrs == {"fast": [0.5, 0.125, 0.03125, 0.0078125]}
    assert [int(r["step"]) for r in rows if r.get("fast")] == [1, 3, 5, 7]
    assert not [r for r in rows if r.get("lr-SGD")]
    monitor, _ = run("step", "warmup-momentum")  # a name ending like a momentum key is still a rate
    assert monitor.lrs == {"warmup-momentum": [0.5, 0.125, 0.03125, 0.0078125]}
    assert LearningRateMonitor(logging_interval=None).logging_interval is None
    with pytest.raises(ConfigError, match="logging_interval"):
        LearningRateMonitor(logging_interval="batch")  # type: ignore[arg-type]


def test_model_summary_table(capsys: pytest.CaptureFixture[str]) -> None:
    text = summarize(TinyClassifier())
    assert text.splitlines()[0].split() == ["Name", "Type", "Params", "Mode"]
    assert "net   Sequential  676     train" in text and "676 total params" in text
    assert "5 modules in train mode" in text and "0 modules in eval mode" in text
    fit(max_steps=1, logger=False, enable_progress_bar=False, callbacks=[ModelSummary()])
    assert "trainable params" in capsys.readouterr().err
    every = summarize(TinyClassifier(), max_depth=-1)  # Lightning's "every layer"
    assert [line.split()[1] for line in every.splitlines()[2:5]] == ["net", "net.0", "net.1"]
    fit(max_steps=1, logger=False, enable_progress_bar=False, callbacks=[ModelSummary(0)])
    assert "trainable params" not in capsys.readouterr().err, "max_depth=0: no table, as in Lightning"


def test_model_summary_runs_example_input_array_for_flops_and_sizes_as_lightnings(
        capsys: pytest.CaptureFixture[str]) -> None:
    """With ``example_input_array``, Lightning's summary adds FLOPs and each layer's input and output sizes (it
    runs the example once, in eval mode, without gradients); the module comes back in its modes, weights unchanged."""

    class WithExample(TinyClassifier):
        def __init__(self) -> None:
            super().__init__(dropout=0.5)
            self.example_input_array = torch.randn(4, 16)
            self.net[0].eval()  # a frozen layer shows as eval

    module = WithExample()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    text = summarize(module, example_input=module.example_input_array)
    lines = text.splitlines()
    assert lines[0].split() == ["Name", "Type", "Params", "Mode", "FLOPs", "In", "sizes", "Out", "sizes"]
    assert lines[2].split() == ["0", "net", "Sequential", "676", "train", "5.1", "K", "[4,", "16]", "[4,", "4]"]
    assert "4 modules in train mode" in text and "1 modules in eval mode" in text and "5.1 K total FLOPs" in text
    assert module.training and not module.net[0].training and module.net[2].training, "modes restored"
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())
    fit_module = WithExample()
    Trainer(max_steps=1, logger=False, enable_progress_bar=False, enable_checkpointing=False).fit(
        fit_module, tiny_loaders()[0])
    assert "[4, 16]" in capsys.readouterr().err, "the Trainer's default summary runs the example"


def test_loggers_take_name_and_version_positionally_as_in_lightning(tmp_path: Path) -> None:
    from xtrain.core.loggers import CSVLogger, TensorBoardLogger

    for cls in (TensorBoardLogger, CSVLogger):
        logger = cls(tmp_path, "my_model", 3)  # TensorBoardLogger("tb_logs", "my_model") in Lightning's docs
        assert (logger.name, logger.version, logger.log_dir) == ("my_model", 3, tmp_path / "my_model" / "version_3")


def test_a_stage_that_writes_no_logs_leaves_no_version_directory_and_the_next_takes_version_0(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader

    from xtrain.core import CSVLogger, TrainModule
    from xtrain.core.testing import tiny_dataset

    class Predicts(TrainModule):  # no hyperparameters: nothing to log
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(16, 3)

        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.net(batch[0])

    loader = DataLoader(tiny_dataset(32), batch_size=16)
    logger = CSVLogger(tmp_path)
    Trainer(accelerator="cpu", logger=logger, enable_progress_bar=False).predict(Predicts(), loader)
    assert not (tmp_path / "xtrain_logs" / "version_0").exists()  # as Lightning: created by a first write
    trainer = Trainer(accelerator="cpu", logger=CSVLogger(tmp_path), max_steps=2, enable_progress_bar=False,
                      enable_model_summary=False)
    trainer.fit(TinyClassifier(), loader)
    assert Path(trainer.log_dir) == tmp_path / "xtrain_logs" / "version_0"
    assert (tmp_path / "xtrain_logs" / "version_0" / "checkpoints").is_dir()


@pytest.mark.parametrize("rich", [False, True], ids=["plain", "rich_terminal"])
def test_progress_bar_of_a_run_resumed_mid_epoch_times_from_its_start(tmp_path: Path, rich: bool) -> None:
    """A run resumed mid-epoch gets no on_train_epoch_start (as in Lightning): the bar's clock started at 0 showed
    the machine's uptime as "elapsed", and the rich bar in a terminal had no task to draw into."""
    train, val = tiny_loaders()
    first = Trainer(max_steps=5, default_root_dir=tmp_path, logger=False, enable_model_summary=False,
                    enable_progress_bar=False)
    first.fit(TinyClassifier(), train, val)
    stream = io.StringIO()
    if rich:
        pytest.importorskip("rich")
        bar: ProgressBar = RichProgressBar(stream=stream, force_terminal=True, refresh_interval=0.0)
    else:
        bar = ProgressBar(stream=stream, log_interval=0.0)
    resumed = Trainer(max_epochs=1, default_root_dir=tmp_path, logger=False, enable_model_summary=False,
                      callbacks=[bar])
    resumed.fit(TinyClassifier(), train, val, ckpt_path="last")
    out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    assert "16/16" in out and "step 16" in out
    if not rich:
        elapsed = re.findall(r"elapsed ([0-9:]+)", out)
        assert elapsed and all(value.startswith("00:0") for value in elapsed), out
