"""Return types that Lightning 2.x scripts rely on: ``trainer.log_dir`` is a ``str``, ``trainer.val_dataloaders`` and
its siblings are what was passed (not a list), and ``metrics.csv`` writes ``epoch`` as ``0``, not ``0.0``."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import CSVLogger, Trainer, TrainModule
from xtrain.core.callbacks import BasePredictionWriter
from xtrain.core.testing import TinyClassifier, TinyData, tiny_loaders


def quiet(**kwargs: Any) -> Trainer:
    defaults: dict[str, Any] = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False,
                                "enable_checkpointing": False, "limit_train_batches": 4, "limit_val_batches": 2,
                                "num_sanity_val_steps": 0}
    return Trainer(**{**defaults, **kwargs})


def csv_rows(logger: CSVLogger) -> list[dict[str, str]]:
    with logger.metrics_file.open(newline="") as f:
        return list(csv.DictReader(f))


# -- trainer.log_dir ------------------------------------------------------------------------------------------------
def test_log_dir_is_a_str_that_scripts_concatenate_and_join(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    trainer = quiet(max_steps=1, logger=logger)
    trainer.fit(TinyClassifier(), tiny_loaders()[0])
    assert isinstance(trainer.log_dir, str) and trainer.log_dir == str(tmp_path / "xtrain_logs" / "version_0")
    assert trainer.log_dir + "/x" == os.path.join(trainer.log_dir, "x") == str(logger.log_dir / "x")


def test_log_dir_without_a_logger_is_the_default_root_dir_as_a_str(tmp_path: Path) -> None:
    trainer = quiet(max_steps=1, default_root_dir=tmp_path)
    assert isinstance(trainer.log_dir, str) and trainer.log_dir == str(tmp_path)


def test_profiler_reports_still_go_under_the_log_dir(tmp_path: Path) -> None:
    trainer = quiet(max_steps=2, logger=CSVLogger(tmp_path), profiler="simple")
    trainer.fit(TinyClassifier(), tiny_loaders()[0])
    assert any(Path(trainer.log_dir).iterdir()), "the profiler's dirpath came from the str log_dir"


# -- trainer.*_dataloader(s) ----------------------------------------------------------------------------------------
def test_dataloaders_are_none_before_a_stage_loads_them() -> None:
    trainer = quiet(max_steps=1)
    assert trainer.train_dataloader is None and trainer.val_dataloaders is None
    assert trainer.test_dataloaders is None and trainer.predict_dataloaders is None


def test_one_loader_passed_is_the_one_loader_returned() -> None:
    train, val = tiny_loaders()
    trainer = quiet(max_epochs=1)
    trainer.fit(TinyClassifier(), train, val)
    assert trainer.train_dataloader is train and trainer.val_dataloaders is val
    assert len(trainer.val_dataloaders) == 4 and trainer.test_dataloaders is None
    trainer.test(trainer.module, val)
    trainer.predict(trainer.module, train)
    assert trainer.test_dataloaders is val and trainer.predict_dataloaders is train
    assert trainer.val_dataloaders is val, "the fit's validation loader stays, as in Lightning"


def test_a_list_of_loaders_is_returned_as_that_list_and_every_loader_still_runs() -> None:
    _, first = tiny_loaders()
    _, second = tiny_loaders(seed=3)
    seen: list[int] = []

    class Two(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            seen.append(dataloader_idx)

    trainer = quiet(max_steps=1)
    trainer.validate(Two(), [first, second])
    shown = trainer.val_dataloaders
    assert isinstance(shown, list) and len(shown) == 2 and shown[0] is first and shown[1] is second
    assert trainer.num_val_batches == [2, 2] and sorted(set(seen)) == [0, 1]
    trainer.test(Two(), (first, second))
    assert isinstance(trainer.test_dataloaders, tuple) and trainer.test_dataloaders == (first, second)


def test_a_datamodules_loaders_are_returned_as_single_loaders() -> None:
    data = TinyData()
    trainer = quiet(max_steps=1)
    trainer.fit(TinyClassifier(), datamodule=data)
    assert isinstance(trainer.train_dataloader, torch.utils.data.DataLoader)
    assert isinstance(trainer.val_dataloaders, torch.utils.data.DataLoader)
    assert len(trainer.train_dataloader) == len(data.train_dataloader())


def test_overfit_batches_shows_the_rebuilt_unshuffled_loader() -> None:
    train, _ = tiny_loaders()
    trainer = quiet(max_steps=1, overfit_batches=2)
    trainer.fit(TinyClassifier(), train)
    shown = trainer.train_dataloader
    assert shown is not train and not isinstance(shown.sampler, torch.utils.data.RandomSampler)


def test_loaders_sharded_over_ranks_are_shown_as_this_ranks_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    train, val = tiny_loaders(shuffle=False)  # 256 and 64 samples, 16 and 4 batches
    trainer = quiet(max_steps=1, limit_train_batches=1.0, limit_val_batches=1.0)
    monkeypatch.setattr(type(trainer.strategy), "distributed_sampler_kwargs",
                        property(lambda _: {"num_replicas": 2, "rank": 1}))
    trainer.fit(TinyClassifier(), train, [val])
    assert trainer.train_dataloader is not train and len(trainer.train_dataloader) == 8
    shown = trainer.val_dataloaders
    assert isinstance(shown, list) and shown[0] is not val and len(shown[0]) == 2, "as Lightning: the rank's shard"


def test_a_prediction_writer_still_sees_every_predict_loader() -> None:
    calls: list[tuple[int, list[int] | None]] = []

    class Writer(BasePredictionWriter):
        def write_on_batch_end(self, trainer: Trainer, module: TrainModule, prediction: Any,
                               batch_indices: list[int] | None, batch: Any, batch_idx: int,
                               dataloader_idx: int) -> None:
            calls.append((dataloader_idx, batch_indices))

    _, first = tiny_loaders(n=32, batch_size=4)  # 8 samples: 2 batches
    _, second = tiny_loaders(n=64, batch_size=4)  # 16 samples: 4 batches
    trainer = quiet(callbacks=[Writer()])
    trainer.predict(TinyClassifier(), [first, second])
    assert [c[0] for c in calls] == [0, 0, 1, 1, 1, 1]
    assert calls[-1][1] == [12, 13, 14, 15], "batch indices come from the second loader's sampler"
    assert trainer.predict_dataloaders == [first, second]


def test_an_epoch_writer_gets_a_flat_list_for_one_loader_and_return_predictions_false_keeps_none() -> None:
    """As Lightning: ``write_on_epoch_end`` receives one entry per batch with one dataloader (a list per dataloader
    with several; ``batch_indices`` always nested), and ``predict(return_predictions=False)`` returns ``None``."""
    received: list[tuple[list[Any], list[Any]]] = []

    class Writer(BasePredictionWriter):
        def write_on_epoch_end(self, trainer: Trainer, module: TrainModule, predictions: list[Any],
                               batch_indices: list[list[list[int] | None]]) -> None:
            received.append((predictions, batch_indices))

    _, one = tiny_loaders(n=32, batch_size=4)  # 8 samples: 2 batches
    _, two = tiny_loaders(n=64, batch_size=4)  # 16 samples: 4 batches
    trainer = quiet(callbacks=[Writer("epoch")])
    returned = trainer.predict(TinyClassifier(), one)
    predictions, indices = received[-1]
    assert len(predictions) == 2 and torch.is_tensor(predictions[0]) and predictions[0].shape == (4, 4)
    assert indices == [[[0, 1, 2, 3], [4, 5, 6, 7]]]
    assert returned is not None and all(torch.equal(a, b) for a, b in zip(returned, predictions, strict=True))
    assert trainer.predict(TinyClassifier(), one, return_predictions=False) is None
    assert len(received[-1][0]) == 2, "the writer still gets them"
    trainer.predict(TinyClassifier(), [one, two], return_predictions=True)
    assert [len(p) for p in received[-1][0]] == [2, 4]


def test_each_stage_starts_its_logged_and_progress_bar_metrics_afresh() -> None:
    """As Lightning: after ``fit`` then ``validate``, ``logged_metrics`` holds the validation's values only (the
    training step values were still listed)."""

    class Shown(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("shown", 1.0, prog_bar=True)
            return loss

    trainer = quiet(max_epochs=1, log_every_n_steps=1)
    module = Shown()
    trainer.fit(module, *tiny_loaders())
    assert {"train_loss", "shown"} <= set(trainer.logged_metrics) and "shown" in trainer.progress_bar_metrics
    fit_metrics = trainer.callback_metrics
    trainer.validate(module, tiny_loaders()[1], verbose=False)
    assert set(trainer.logged_metrics) == {"val_loss", "val_acc"} and "shown" not in trainer.progress_bar_metrics
    assert "shown" in fit_metrics and "shown" not in trainer.callback_metrics


# -- metrics.csv ----------------------------------------------------------------------------------------------------
def test_metrics_csv_writes_epoch_and_step_as_integers_and_metrics_as_floats(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    quiet(max_epochs=2, logger=logger, log_every_n_steps=2).fit(TinyClassifier(), *tiny_loaders())
    rows = csv_rows(logger)
    assert {r["epoch"] for r in rows} == {"0", "1"}
    assert all(int(r["epoch"]) in (0, 1) and r["step"].isdigit() for r in rows)
    losses = [r["train_loss"] for r in rows if r.get("train_loss")]
    assert losses and all("." in v or "e" in v for v in losses), "other metrics stay floats"


def test_csv_logger_keeps_whole_metric_values_as_floats(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, version=0)
    logger.log_metrics({"epoch": 1.0, "acc": 1.0, "lr": 0.5}, 3)
    logger.log_metrics({"epoch": 1.0, "acc": 0.0, "lr": 0.5}, 4)
    assert logger.metrics_file.read_text().splitlines() == ["acc,epoch,lr,step", "1.0,1,0.5,3", "0.0,1,0.5,4"]


def test_csv_resume_keeps_the_rows_before_the_checkpoint_and_rewrites_old_float_epochs(tmp_path: Path) -> None:
    (tmp_path / "xtrain_logs" / "version_0").mkdir(parents=True)
    old = "step,epoch,x\n1,0.0,1.0\n2,0.0,2.0\n3,1.0,3.0\n"  # written before epochs were integers
    (tmp_path / "xtrain_logs" / "version_0" / "metrics.csv").write_text(old)
    state = {"version": 0, "name": "xtrain_logs", "rows": 2}
    resumed = CSVLogger(tmp_path)
    assert resumed.resume_problems(state) == []
    resumed.resume(state, step=2)
    resumed.log_metrics({"epoch": 1.0, "x": 30.0}, 3)
    resumed.log_metrics({"epoch": 1.0, "x": 40.0, "y": 2.0}, 4)
    assert resumed.metrics_file.read_text().splitlines() == ["epoch,step,x,y", "0,1,1.0,", "0,2,2.0,", "1,3,30.0,",
                                                             "1,4,40.0,2.0"]


def test_a_resumed_fit_continues_metrics_csv_with_integer_epochs(tmp_path: Path) -> None:
    first = CSVLogger(tmp_path, version=0)
    quiet(max_epochs=1, logger=first, log_every_n_steps=1, enable_checkpointing=True).fit(
        TinyClassifier(), *tiny_loaders())
    ckpt = first.log_dir / "checkpoints" / "last.ckpt"
    second = CSVLogger(tmp_path, version=0)
    quiet(max_epochs=2, logger=second, log_every_n_steps=1, enable_checkpointing=True).fit(
        TinyClassifier(), *tiny_loaders(), ckpt_path=ckpt)
    rows = [r for r in csv_rows(second) if r.get("train_loss")]
    assert [(r["step"], r["epoch"]) for r in rows] == [(str(s), "0" if s <= 3 else "1") for s in range(8)]


# -- trainer.logged_metrics -----------------------------------------------------------------------------------------
def test_logged_metrics_hold_step_metrics_of_epochs_shorter_than_the_logging_interval(tmp_path: Path) -> None:
    """As Lightning: 4 steps per epoch with log_every_n_steps=50 still show train_loss (trial: Lightning's
    transformer example read logged_metrics['train_loss'] after fit)."""

    class Logged(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("train_loss", loss)
            self.log("hidden", loss, logger=False)
            return loss

    trainer = quiet(max_epochs=2, logger=CSVLogger(tmp_path))
    module = Logged()
    trainer.fit(module, *tiny_loaders())
    assert "train_loss" in trainer.logged_metrics and "hidden" not in trainer.logged_metrics
    assert trainer.logged_metrics["train_loss"] == pytest.approx(float(trainer.callback_metrics["train_loss"]))
    assert "train_loss" not in csv_rows(trainer.logger)[0], "the logger itself still got nothing before step 50"
