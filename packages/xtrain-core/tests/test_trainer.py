from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from xtrain.core import Callback, ConfigError, CSVLogger, Trainer, TrainModule, seed_everything
from xtrain.core.testing import TinyClassifier, tiny_dataset, tiny_loaders


def quiet(**kwargs: Any) -> Trainer:
    defaults: dict[str, Any] = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False,
                                "enable_checkpointing": False}
    return Trainer(**{**defaults, **kwargs})


class Recorder(Callback):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_train_epoch_start(self, trainer: Trainer, module: TrainModule) -> None:
        self.calls.append(f"epoch_start:{trainer.current_epoch}")

    def on_validation_end(self, trainer: Trainer, module: TrainModule) -> None:
        self.calls.append(f"val:{'sanity' if trainer.sanity_checking else trainer._progress.batches_in_epoch}")

    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule) -> None:
        self.calls.append(f"epoch_end:{trainer.current_epoch}")


def test_fit_trains_and_counts(tmp_path: Path) -> None:
    seed_everything(0)
    module = TinyClassifier()
    train, val = tiny_loaders()
    rec = Recorder()
    trainer = quiet(max_epochs=2, callbacks=[rec], default_root_dir=tmp_path)
    trainer.fit(module, train, val)
    assert trainer.current_epoch == 2 and trainer.global_step == 2 * len(train)
    assert module.losses[-1] < module.losses[0]
    assert rec.calls == ["val:sanity", "epoch_start:0", f"val:{len(train)}", "epoch_end:0", "epoch_start:1",
                         f"val:{len(train)}", "epoch_end:1"]
    assert set(trainer.callback_metrics) >= {"train_loss", "val_loss", "val_acc"}


def test_val_check_interval_and_limits(tmp_path: Path) -> None:
    train, val = tiny_loaders()
    rec = Recorder()
    quiet(max_epochs=1, limit_train_batches=8, val_check_interval=0.5, num_sanity_val_steps=0,
          callbacks=[rec]).fit(TinyClassifier(), train, val)
    assert [c for c in rec.calls if c.startswith("val")] == ["val:4", "val:8"]
    rec2 = Recorder()
    quiet(max_epochs=3, limit_train_batches=2, check_val_every_n_epoch=2, num_sanity_val_steps=0,
          callbacks=[rec2]).fit(TinyClassifier(), train, val)
    assert [c for c in rec2.calls if c.startswith("val")] == ["val:2"]


def test_max_steps_stops_mid_epoch() -> None:
    train, _ = tiny_loaders()
    trainer = quiet(max_steps=5)
    trainer.fit(TinyClassifier(), train)
    assert trainer.global_step == 5 and trainer.current_epoch == 0


def test_gradient_accumulation_steps_every_n_batches() -> None:
    train, _ = tiny_loaders()
    steps: list[int] = []

    class Count(Callback):
        def on_before_optimizer_step(self, trainer: Trainer, module: TrainModule, optimizer: Any) -> None:
            steps.append(trainer._progress.batches_in_epoch)

    trainer = quiet(max_epochs=1, limit_train_batches=7, accumulate_grad_batches=3, callbacks=[Count()])
    trainer.fit(TinyClassifier(), train)
    # The step happens while batch 3, 6 and the epoch's last batch (7) are being processed.
    assert steps == [2, 5, 6] and trainer.global_step == 3


def test_accumulation_matches_a_bigger_batch() -> None:
    data = tiny_dataset(64)
    seed_everything(0)
    big = TinyClassifier()
    quiet(max_steps=4).fit(big, DataLoader(data, batch_size=16))
    seed_everything(0)
    small = TinyClassifier()
    quiet(max_steps=4, accumulate_grad_batches=2).fit(small, DataLoader(data, batch_size=8))
    for a, b in zip(big.parameters(), small.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("algorithm", ["norm", "value"])
def test_gradient_clipping(algorithm: str) -> None:
    train, _ = tiny_loaders()
    seen: list[float] = []

    class Grad(Callback):
        def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any,
                               batch_idx: int) -> None:
            grads = [p.grad for p in module.parameters() if p.grad is not None]  # the step's, as Lightning keeps them
            if algorithm == "norm":
                seen.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
            else:
                seen.append(max(float(g.abs().max()) for g in grads))

    quiet(max_steps=5, gradient_clip_val=0.01, gradient_clip_algorithm=algorithm,
          callbacks=[Grad()]).fit(TinyClassifier(lr=0.5), train)
    assert max(seen) <= 0.01 + 1e-6


def test_lr_scheduler_steps_per_interval() -> None:
    class Sched(TinyClassifier):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=1.0)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(
                opt, step_size=1, gamma=0.5), "interval": "step", "frequency": 2}}

    module = Sched()
    trainer = quiet(max_steps=6)
    trainer.fit(module, tiny_loaders()[0])
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.5 ** 3)


def test_a_step_scheduler_frequency_counts_the_batches_of_each_epoch_as_lightning() -> None:
    """5 batches an epoch, frequency 2: stepped after the 2nd and 4th batch of every epoch (Lightning 2.6's learning
    rates, measured), not every 2nd step of the run."""
    seen: list[float] = []

    class Sched(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            seen.append(self.trainer.optimizers[0].param_groups[0]["lr"])
            return super().training_step(batch, batch_idx)

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=1.0)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(
                opt, step_size=1, gamma=0.5), "interval": "step", "frequency": 2}}

    quiet(max_epochs=2, limit_train_batches=5).fit(Sched(), tiny_loaders()[0])
    assert seen == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125, 0.0625]


def test_reduce_on_plateau_needs_and_uses_its_monitor() -> None:
    class Plateau(TinyClassifier):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=1.0)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(
                opt, patience=0, factor=0.1), "monitor": "val_loss"}}

    train, val = tiny_loaders()
    trainer = quiet(max_epochs=3, limit_train_batches=1, limit_val_batches=1)
    trainer.fit(Plateau(), train, val)
    assert trainer.optimizers[0].param_groups[0]["lr"] <= 1.0

    class Missing(TinyClassifier):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=1.0)
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt)}

    with pytest.raises(ConfigError, match="ReduceLROnPlateau needs a metric to monitor"):
        quiet(max_steps=1).fit(Missing(), train)


@pytest.mark.parametrize("strict", [True, False])
def test_reduce_on_plateau_strict_false_skips_a_missing_monitor(strict: bool) -> None:
    """As Lightning's "strict" key: False warns and skips the update each epoch; True (default) is the error."""

    class Unlogged(TinyClassifier):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "monitor": "val_missing",
                                                       "strict": strict}}

    train, val = tiny_loaders()
    trainer = quiet(max_epochs=3, limit_train_batches=2, limit_val_batches=1)
    if strict:
        with pytest.raises(ConfigError, match="monitor='val_missing': was never logged"):
            trainer.fit(Unlogged(), train, val)
        return
    with pytest.warns(RuntimeWarning, match="'val_missing', which was not logged .*strict=False") as caught:
        trainer.fit(Unlogged(), train, val)
    assert trainer.current_epoch == 3 and trainer.optimizers[0].param_groups[0]["lr"] == 0.1
    assert sum("val_missing" in str(w.message) for w in caught) == 3  # once an epoch, as Lightning's


def test_a_step_plateau_scheduler_reads_the_validation_of_its_batch() -> None:
    """As Lightning (figures checked against 2.6.6): a step-interval ReduceLROnPlateau steps after the batch's end
    hooks and the validation due at that batch, so it reads that validation's val_loss. It stepped right after the
    optimizer step: before the first validation (strict: "was never logged") or on the previous one's value."""
    lrs: list[float] = []
    seen_at_batch_end: list[float] = []

    class StepPlateau(TinyClassifier):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.3)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5, threshold=10.0)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "interval": "step", "frequency": 4,
                                                       "monitor": "val_loss"}}

        def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
            lrs.append(optimizer.param_groups[0]["lr"])

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            seen_at_batch_end.append(self.trainer.optimizers[0].param_groups[0]["lr"])

    train, val = tiny_loaders()
    trainer = quiet(max_epochs=1, limit_train_batches=12, limit_val_batches=1, val_check_interval=4)
    trainer.fit(StepPlateau(), train, val)
    # Validations and due scheduler steps after batches 4, 8 and 12; threshold=10: no reading counts as an
    # improvement, so each halves the rate.
    assert lrs == [0.3] * 4 + [0.15] * 4 + [0.075] * 4
    assert seen_at_batch_end == lrs  # a batch's hooks see the rate before its plateau step
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.0375)


def test_scheduler_strict_must_be_a_bool() -> None:
    class Odd(TinyClassifier):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1),
                                                       "strict": "no"}}

    with pytest.raises(ConfigError, match="strict='no': must be True or False"):
        quiet(max_steps=1).fit(Odd(), tiny_loaders()[0])


def test_fast_dev_run_runs_one_batch_of_each_stage(tmp_path: Path) -> None:
    rec = Recorder()
    train, val = tiny_loaders()
    trainer = Trainer(fast_dev_run=True, callbacks=[rec], default_root_dir=tmp_path, enable_progress_bar=False)
    trainer.fit(TinyClassifier(), train, val)
    assert trainer.global_step == 1 and rec.calls == ["epoch_start:0", "val:1", "epoch_end:0"]
    assert not list(tmp_path.rglob("*.ckpt")) and not trainer.loggers


def test_manual_optimization() -> None:
    class Manual(TinyClassifier):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:
            opt = self.optimizers()
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self(x), y)
            self.losses.append(float(loss.detach()))
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()

    module = Manual()
    trainer = quiet(max_steps=10)
    trainer.fit(module, tiny_loaders()[0])
    assert trainer.global_step == 10 and module.losses[-1] < module.losses[0]
    with pytest.raises(ConfigError, match="manual optimization"):
        quiet(max_steps=1, gradient_clip_val=1.0).fit(Manual(), tiny_loaders()[0])


def test_validate_test_predict() -> None:
    module = TinyClassifier()
    train, val = tiny_loaders()
    trainer = quiet(max_epochs=2)
    trainer.fit(module, train, val)
    (val_metrics,) = trainer.validate(module, val)
    assert set(val_metrics) == {"val_loss", "val_acc"} and val_metrics["val_acc"] > 0.5
    (test_metrics,) = trainer.test(module, val)
    assert set(test_metrics) == {"test_loss", "test_acc"}
    predictions = trainer.predict(module, DataLoader(tiny_dataset(32), batch_size=8))
    assert len(predictions) == 4 and predictions[0].shape == (8, 4)


def test_csv_logger_writes_step_and_epoch_metrics(tmp_path: Path) -> None:
    class EpochLog(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("train_acc", 0.5, on_step=False, on_epoch=True)
            return loss

    logger = CSVLogger(tmp_path)
    train, val = tiny_loaders()
    quiet(max_epochs=2, logger=logger, log_every_n_steps=4).fit(EpochLog(), train, val)
    rows = list(csv.DictReader(logger.metrics_file.open()))
    step_rows = [r for r in rows if r.get("train_loss")]
    assert [int(r["step"]) for r in step_rows] == list(range(3, 2 * len(train), 4))
    epoch_rows = [r for r in rows if r.get("train_acc")]
    assert len(epoch_rows) == 2 and float(epoch_rows[0]["train_acc"]) == 0.5
    assert len([r for r in rows if r.get("val_loss")]) == 2
    assert (logger.log_dir / "hparams.json").is_file() and (logger.log_dir / "hparams.yaml").is_file()


@pytest.mark.parametrize(("kwargs", "argument"), [
    ({"max_epochs": -2}, "max_epochs"), ({"max_steps": 1.5}, "max_steps"), ({"max_time": "1h"}, "max_time"),
    ({"max_time": {"hourz": 1}}, "max_time"), ({"limit_train_batches": 1.5}, "limit_train_batches"),
    ({"limit_val_batches": -1}, "limit_val_batches"), ({"limit_test_batches": "all"}, "limit_test_batches"),
    ({"val_check_interval": 0.0}, "val_check_interval"), ({"val_check_interval": 1.5}, "val_check_interval"),
    ({"check_val_every_n_epoch": 0}, "check_val_every_n_epoch"), ({"num_sanity_val_steps": -5}, "num_sanity_val_steps"),
    ({"accumulate_grad_batches": 0}, "accumulate_grad_batches"), ({"gradient_clip_val": -1.0}, "gradient_clip_val"),
    ({"gradient_clip_val": "x"}, "gradient_clip_val"), ({"gradient_clip_algorithm": "foo"}, "gradient_clip_algorithm"),
    ({"log_every_n_steps": 0}, "log_every_n_steps"), ({"fast_dev_run": -1}, "fast_dev_run"),
    ({"callbacks": [object()]}, "callbacks"), ({"logger": "tensorboard?"}, "logger"),
    ({"deterministic": "yes"}, "deterministic"), ({"default_root_dir": 3}, "default_root_dir"),
])
def test_invalid_trainer_arguments(kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(ConfigError) as info:
        Trainer(**kwargs)
    assert str(info.value).startswith(f"{argument}=") and "Fix:" in str(info.value)


def test_each_trainer_sets_deterministic_mode_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep in one process: a deterministic=True trial must not leave the mode on for a later deterministic=False
    one (as Lightning); the default (None) leaves the process's setting alone; deterministic turns cuDNN's
    autotuner off unless benchmark is given, and sets cuBLAS's workspace (required for its deterministic mode)."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.benchmark)
    try:
        torch.backends.cudnn.benchmark = True
        Trainer(logger=False, deterministic="warn")
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.backends.cudnn.benchmark is False
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        Trainer(logger=False, deterministic=True)
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
        Trainer(logger=False)
        assert torch.are_deterministic_algorithms_enabled()
        Trainer(logger=False, deterministic=False, benchmark=True)
        assert not torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.benchmark is True
        with pytest.warns(UserWarning, match="deterministic=True with benchmark=True"):
            Trainer(logger=False, deterministic=True, benchmark=True)
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.benchmark = before[2]
