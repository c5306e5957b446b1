"""The training callbacks on one process: weight averaging, accumulation schedules, finetuning, device statistics,
throughput, timer, on-exception checkpoints, lambda callbacks and spike detection. Rank-dependent behaviour is tested
on 2 processes in tests_integration/test_callbacks_distributed.py."""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from torch.utils.data import DataLoader
from torch.utils.flop_counter import FlopCounterMode
from typing_extensions import override

from xtrain.core import Callback, ConfigError, CSVLogger, ModelCheckpoint, Trainer, TrainModule, seed_everything
from xtrain.core.callbacks import (
    BackboneFinetuning,
    DeviceStatsMonitor,
    EMAWeightAveraging,
    GradientAccumulationScheduler,
    LambdaCallback,
    OnExceptionCheckpoint,
    SpikeDetection,
    ThroughputMonitor,
    Timer,
)
from xtrain.core.defaults.cpu import CPUAccelerator
from xtrain.core.testing import TinyClassifier, tiny_dataset, tiny_loaders


def quiet(**kwargs: Any) -> Trainer:
    defaults: dict[str, Any] = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False,
                                "enable_checkpointing": False, "num_sanity_val_steps": 0, "accelerator": "cpu"}
    return Trainer(**{**defaults, **kwargs})


def params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


# -- EMA -------------------------------------------------------------------------------------------------------------
class SeesWeights(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.validated: list[list[torch.Tensor]] = []

    def on_validation_start(self) -> None:
        self.validated.append(params(self))


class StepWeights(Callback):
    def __init__(self) -> None:
        self.after_steps: list[list[torch.Tensor]] = []

    def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any, idx: int) -> None:
        self.after_steps.append(params(module))


def test_ema_weights_are_validated_checkpointed_and_kept(tmp_path: Path) -> None:
    seed_everything(0)
    module = SeesWeights()
    train, val = tiny_loaders(n=64, batch_size=16)
    ema, steps = EMAWeightAveraging(decay=0.7), StepWeights()
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    quiet(max_epochs=2, callbacks=[steps, ema, checkpoint]).fit(module, train, val)
    # The EMA by hand: the first update copies the weights, later ones move 30% of the way.
    expected = steps.after_steps[0]
    history = [expected]
    for weights in steps.after_steps[1:]:
        expected = [0.7 * e + 0.3 * w for e, w in zip(expected, weights, strict=True)]
        history.append(expected)
    for seen, index in zip(module.validated, (3, 7), strict=True):  # validation after steps 4 and 8
        assert all(torch.allclose(s, h, atol=1e-6) for s, h in zip(seen, history[index], strict=True))
    assert ema.num_averaged == 8
    assert all(torch.allclose(p, h, atol=1e-6) for p, h in zip(params(module), history[-1], strict=True)), \
        "the module holds the averaged weights when fitting ends"
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    names = [name for name, _ in module.named_parameters()]
    assert all(torch.allclose(saved["state_dict"][n], h, atol=1e-6) for n, h in zip(names, history[-1], strict=True))
    training = saved["weight_averaging"]["training_state_dict"]
    assert all(torch.equal(training[n], w) for n, w in zip(names, steps.after_steps[-1], strict=True))
    fresh = SeesWeights()
    quiet(callbacks=[EMAWeightAveraging(decay=0.7)]).validate(fresh, val, ckpt_path=tmp_path / "last.ckpt")
    assert all(torch.allclose(s, h, atol=1e-6) for s, h in zip(fresh.validated[0], history[-1], strict=True)), \
        "evaluating from the checkpoint evaluates the averaged weights"


def test_ema_rejects_a_bad_decay() -> None:
    with pytest.raises(ConfigError, match="decay"):
        EMAWeightAveraging(decay=1.5)


# -- gradient accumulation schedule -----------------------------------------------------------------------------------
class CountSteps(Callback):
    def __init__(self) -> None:
        self.steps: dict[int, list[int]] = {}
        self._batch = -1

    def on_train_batch_start(self, trainer: Trainer, module: TrainModule, batch: Any, batch_idx: int) -> None:
        self._batch = batch_idx

    def on_before_optimizer_step(self, trainer: Trainer, module: TrainModule, optimizer: Any) -> None:
        self.steps.setdefault(trainer.current_epoch, []).append(self._batch)


def test_gradient_accumulation_scheduler_changes_the_window_by_epoch() -> None:
    count = CountSteps()
    trainer = quiet(max_epochs=3, limit_train_batches=7,
                    callbacks=[count, GradientAccumulationScheduler({1: 3, 2: 2})])
    trainer.fit(TinyClassifier(), tiny_loaders(n=128)[0])
    # Windows count the epoch's batches (not all batches so far) and the epoch's last batch always steps.
    assert count.steps == {0: [0, 1, 2, 3, 4, 5, 6], 1: [2, 5, 6], 2: [1, 3, 5, 6]}
    assert trainer.accumulate_grad_batches == 1


def test_gradient_accumulation_scheduler_owns_the_setting() -> None:
    trainer = quiet(max_epochs=1, accumulate_grad_batches=2, callbacks=[GradientAccumulationScheduler({0: 2})])
    with pytest.raises(ConfigError, match="accumulate_grad_batches"):
        trainer.fit(TinyClassifier(), tiny_loaders(n=32)[0])
    with pytest.raises(ConfigError, match="scheduling"):
        GradientAccumulationScheduler({0: 0})


# -- finetuning ---------------------------------------------------------------------------------------------------
class WithBackbone(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU())
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=0.1, momentum=0.9)


def test_backbone_finetuning_unfreezes_with_its_own_learning_rate(tmp_path: Path) -> None:
    seed_everything(0)
    module = WithBackbone()
    frozen = module.backbone[0].weight.detach().clone()
    lrs: list[list[float]] = []
    record = LambdaCallback(on_train_epoch_end=lambda t, m: lrs.append([g["lr"] for g in t.optimizers[0].param_groups]))
    finetune = BackboneFinetuning(1, lambda_func=lambda epoch: 2.0)
    train = tiny_loaders(n=64)[0]
    quiet(max_epochs=1, callbacks=[finetune, record, ModelCheckpoint(dirpath=tmp_path, save_last=True)]).fit(
        module, train)
    assert torch.equal(module.backbone[0].weight, frozen), "epoch 0 trains the head only"
    assert module.backbone[1].weight.requires_grad, "batch norm keeps training (train_bn=True)"
    trainer = quiet(max_epochs=3, callbacks=[BackboneFinetuning(1, lambda_func=lambda epoch: 2.0), record])
    trainer.fit(module, train, ckpt_path=tmp_path / "last.ckpt")  # resuming replays the unfreezing first
    assert not torch.equal(module.backbone[0].weight, frozen)
    assert lrs == [[0.1], [0.1, pytest.approx(0.01)], [0.1, pytest.approx(0.02)]]


# -- device statistics and throughput ----------------------------------------------------------------------------
def _csv(logger: CSVLogger) -> list[dict[str, str]]:
    with open(Path(logger.log_dir) / "metrics.csv") as f:
        return list(csv.DictReader(f))


def test_device_stats_monitor_logs_the_accelerators_statistics(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    monitor = DeviceStatsMonitor()
    quiet(max_steps=4, log_every_n_steps=2, logger=logger, callbacks=[monitor]).fit(
        TinyClassifier(), tiny_loaders(n=64)[0])
    rows = [r for r in _csv(logger) if r.get("device_stats/on_train_batch_end/cpu_max_rss_mb")]
    assert [int(r["step"]) for r in rows] == [1, 3]  # Lightning's: the steps before the batch
    assert float(rows[-1]["device_stats/on_train_batch_end/cpu_max_rss_mb"]) > 10


class KnownPeak(CPUAccelerator):
    name: ClassVar[str] = "cpu"

    @override
    def peak_flops(self, device: torch.device, dtype: torch.dtype) -> float | None:
        return 1e12 if dtype == torch.float32 else None


def test_throughput_monitor_measures_flops_and_mfu() -> None:
    module = TinyClassifier()
    x, y = tiny_dataset(16)[:]
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(module(x), y).backward()
    module.zero_grad()
    monitor = ThroughputMonitor()
    quiet(max_steps=4, log_every_n_steps=2, accelerator=KnownPeak(), callbacks=[monitor]).fit(
        module, DataLoader(tiny_dataset(64), batch_size=16))
    assert monitor.flops_per_batch == counter.get_total_flops() > 0
    last = monitor.last
    assert last["throughput/samples"] == 64 and last["throughput/world_size"] == 1
    assert last["throughput/samples_per_sec"] == pytest.approx(16 * last["throughput/device/batches_per_sec"])
    assert last["throughput/mfu"] == pytest.approx(last["throughput/device/flops_per_sec"] / 1e12)


# -- timer and exceptions --------------------------------------------------------------------------------------
def test_timer_stops_training_and_saves_its_time() -> None:
    slow = LambdaCallback(on_train_batch_end=lambda *args: time.sleep(0.05))
    timer = Timer({"seconds": 0.3})
    trainer = quiet(max_epochs=100, callbacks=[slow, timer])
    trainer.fit(TinyClassifier(), tiny_loaders(n=64)[0])
    assert 1 <= trainer.global_step < 400 and trainer.should_stop
    assert 0.3 <= timer.time_elapsed("train") < 30
    assert timer.state_dict()["time_elapsed"]["train"] == pytest.approx(timer.time_elapsed("train"))
    assert timer.time_remaining() is not None and timer.time_remaining() <= 0  # type: ignore[operator]
    with pytest.raises(ConfigError, match="duration"):
        Timer("an hour")


class FailsAtStep(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == 3:
            raise RuntimeError("boom")
        return super().training_step(batch, batch_idx)


def test_on_exception_checkpoint_saves_the_failing_run(tmp_path: Path) -> None:
    callback = OnExceptionCheckpoint(tmp_path)
    with pytest.raises(RuntimeError, match="boom"):
        quiet(max_epochs=1, callbacks=[callback]).fit(FailsAtStep(), tiny_loaders(n=128)[0])
    saved = torch.load(callback.ckpt_path, weights_only=True)
    assert saved["loops"]["global_step"] == 3 and "optimizer_states" in saved


# -- lambda callback ------------------------------------------------------------------------------------------------
def test_lambda_callback_runs_only_the_given_hooks() -> None:
    epochs: list[int] = []
    callback = LambdaCallback(on_train_epoch_end=lambda trainer, module: epochs.append(trainer.current_epoch))
    trainer = quiet(max_epochs=2, callbacks=[callback])
    trainer.fit(TinyClassifier(), tiny_loaders(n=32)[0])
    assert epochs == [0, 1]
    assert type(callback).on_train_batch_end is Callback.on_train_batch_end, "other hooks stay the base no-ops"
    assert callback.state_key == "LambdaCallback"
    with pytest.raises(ConfigError, match="on_train_epoch_ends"):
        LambdaCallback(on_train_epoch_ends=print)


# -- spike detection -------------------------------------------------------------------------------------------------
class Spiky(TinyClassifier):
    """The loss of batch 5 of epoch 1 is 1000 times too large."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        return loss * 1000 if (self.current_epoch, batch_idx) == (1, 5) else loss


class Snapshots(Callback):
    def __init__(self) -> None:
        self.before: dict[int, list[torch.Tensor]] = {}
        self.after: dict[int, list[torch.Tensor]] = {}

    def on_train_batch_start(self, trainer: Trainer, module: TrainModule, batch: Any, idx: int) -> None:
        self.before[trainer.current_epoch * 100 + idx] = params(module)

    def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any, idx: int) -> None:
        self.after[trainer.current_epoch * 100 + idx] = params(module)


@pytest.mark.parametrize("mode", ["warn", "skip", "stop"])
def test_spike_detection(mode: str) -> None:
    seed_everything(0)
    spikes, snaps = SpikeDetection(mode=mode, window=5, warmup=3), Snapshots()  # type: ignore[arg-type]
    trainer = quiet(max_epochs=2, callbacks=[spikes, snaps])
    with pytest.warns(UserWarning, match="loss spike"):
        trainer.fit(Spiky(), tiny_loaders(n=128)[0])  # 8 batches per epoch
    found = [(s["epoch"], s["batch_idx"]) for s in spikes.spikes]
    # warn takes the huge step, so the losses after it may spike too
    assert found[0] == (1, 5) and (mode == "warn" or found == [(1, 5)])
    unchanged = all(torch.equal(a, b) for a, b in zip(snaps.before[105], snaps.after[105], strict=True))
    assert unchanged == (mode != "warn")
    steps = {"warn": 16, "skip": 15, "stop": 13}[mode]  # stop: 8 + 5 steps, the spiking batch not stepped
    assert trainer.global_step == steps
    assert spikes.state_dict()["spikes"] == spikes.spikes


# -- the CLI ----------------------------------------------------------------------------------------------------
def test_the_cli_knows_the_callbacks_by_class_name() -> None:
    pytest.importorskip("jsonargparse")
    import json

    from xtrain.core._internal.cli.instantiate import class_from_path
    from xtrain.core._internal.cli.main import _stage_parser

    wanted = {"EMAWeightAveraging": {"decay": 0.9}, "StochasticWeightAveraging": {"swa_lrs": 0.01},
              "GradientAccumulationScheduler": {"scheduling": {0: 1, 2: 4}}, "BackboneFinetuning": {},
              "DeviceStatsMonitor": {}, "ThroughputMonitor": {}, "Timer": {"duration": "00:01:00:00"},
              "OnExceptionCheckpoint": {"dirpath": "crash"}, "SpikeDetection": {"mode": "stop"}}
    given = [{"class_path": name, "init_args": args} for name, args in wanted.items()]
    cfg = _stage_parser("fit").parse_args(["--model", "xtrain.core.testing.TinyClassifier",
                                           "--trainer.callbacks", json.dumps(given)])
    built = [class_from_path(c.class_path)(**vars(c.init_args)) for c in cfg.trainer.callbacks]
    assert [type(cb).__name__ for cb in built] == list(wanted)
    assert built[2].factor(3) == 4 and built[-1].mode == "stop"
