"""Runs that can only end badly are refused (or warned about) before training starts."""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from xtrain.core import Accelerator, Callback, Trainer, TrainModule
from xtrain.core._internal.data import check_train_batches, prepare_dataloader
from xtrain.core.defaults.cpu import CPUAccelerator
from xtrain.core.errors import ConfigError
from xtrain.core.testing import TinyClassifier, tiny_loaders


def _loader(n: int, batch_size: int, *, drop_last: bool = False) -> DataLoader[Any]:
    data = TensorDataset(torch.randn(n, 16), torch.randint(0, 4, (n,)))
    return DataLoader(data, batch_size=batch_size, drop_last=drop_last, shuffle=n > 0)  # torch refuses to shuffle 0


class Started(Callback):
    def __init__(self) -> None:
        self.started = False

    def on_train_start(self, trainer: Trainer, module: TrainModule) -> None:
        self.started = True


def _trainer(tmp_path: Path, **kwargs: Any) -> Trainer:
    options: dict[str, Any] = {"accelerator": "cpu", "devices": 1, "max_epochs": 1, "default_root_dir": tmp_path,
                               "logger": False, "enable_progress_bar": False, "enable_model_summary": False,
                               "enable_checkpointing": False}
    return Trainer(**{**options, **kwargs})


@pytest.mark.parametrize(("n", "drop_last", "expected"), [
    (0, False, r"train_dataloaders=<DataLoader over TensorDataset: len=0, batch_size=8, drop_last=False>: the "
               r"training dataset is empty"),
    (5, True, r"train_dataloaders=<DataLoader over TensorDataset: len=0, batch_size=8, drop_last=True>: yields no "
              r"batch: 5 sample\(s\) "
              r"with batch_size=8 and drop_last=True"),
])
def test_an_empty_train_loader_is_refused_before_training(tmp_path: Path, n: int, drop_last: bool,
                                                          expected: str) -> None:
    started = Started()
    with pytest.raises(ConfigError, match=expected) as info:
        _trainer(tmp_path, callbacks=[started]).fit(TinyClassifier(), _loader(n, 8, drop_last=drop_last))
    assert "Fix:" in str(info.value)
    assert not started.started


def test_the_message_names_the_rank_that_gets_no_batch() -> None:
    loader = prepare_dataloader(_loader(6, 4, drop_last=True), distributed={"num_replicas": 2, "rank": 1},
                                use_distributed_sampler=True, training=True)
    with pytest.raises(ConfigError, match=r"Split over 2 ranks, rank 1 gets 3 of the 6 samples, so rank 1 gets 0 "
                                          r"batches") as info:
        check_train_batches(loader)
    assert "batch_size of at most 3" in str(info.value)
    check_train_batches(prepare_dataloader(_loader(6, 4), distributed={"num_replicas": 2, "rank": 1},
                                           use_distributed_sampler=True, training=True))  # 1 batch: fine


def test_an_empty_validation_loader_warns_and_training_goes_on(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path)
    with pytest.warns(UserWarning, match=r"validation dataloader 0 has no batch \(len 0: 3 sample\(s\) on this rank, "
                                         r"batch_size=8, drop_last=True\)"):
        trainer.fit(TinyClassifier(), tiny_loaders()[0], _loader(3, 8, drop_last=True))
    assert trainer.global_step == 16


class _Stream(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """A streaming dataset: no ``__len__``, so ``len()`` of its DataLoader raises TypeError."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        g = torch.Generator().manual_seed(0)
        for _ in range(self.n):
            yield torch.randn(16, generator=g), torch.randint(0, 4, (), generator=g)


def test_a_stream_without_length_trains_and_validates(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_epochs=2, limit_val_batches=2)
    trainer.fit(TinyClassifier(), DataLoader(_Stream(40), batch_size=8), DataLoader(_Stream(24), batch_size=8))
    assert trainer.global_step == 10  # 5 batches a pass, each epoch a new pass
    assert "val_loss" in trainer.callback_metrics
    assert trainer.num_training_batches == float("inf")


def test_a_fraction_of_a_stream_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"limit_train_batches=0.5: is a fraction, but the dataloader has no length"):
        _trainer(tmp_path, limit_train_batches=0.5).fit(TinyClassifier(), DataLoader(_Stream(40), batch_size=8))


@pytest.mark.parametrize("kwargs", [{"max_epochs": 0}, {"max_steps": 0}])
def test_zero_length_training_warns(kwargs: dict[str, int]) -> None:
    name, value = next(iter(kwargs.items()))
    with pytest.warns(UserWarning, match=re.escape(f"{name}={value}: fit will not train at all")):
        Trainer(accelerator="cpu", logger=False, **kwargs)


@pytest.mark.parametrize(("kwargs", "text"), [
    ({"min_epochs": 5, "max_epochs": 2}, "min_epochs=5 is more than max_epochs=2: training stops at max_epochs, so "
                                         "min_epochs never holds. Raise max_epochs to at least 5, or lower min_epochs."),
    ({"min_steps": 50, "max_steps": 10}, "min_steps=50 is more than max_steps=10"),
])
def test_a_minimum_above_its_maximum_warns_and_the_maximum_wins(tmp_path: Path, kwargs: dict[str, int],
                                                                text: str) -> None:
    with pytest.warns(UserWarning, match=re.escape(text)):
        trainer = _trainer(tmp_path, **{"max_epochs": -1, **kwargs})
    trainer.fit(TinyClassifier(), _loader(32, 8))
    assert (trainer.current_epoch, trainer.global_step) == ((2, 8) if "max_epochs" in kwargs else (2, 10))


def test_no_warning_for_ordinary_settings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Trainer(accelerator="cpu", devices=1, logger=False, max_epochs=1)
        Trainer(accelerator="cpu", devices=1, logger=False, min_epochs=3, max_epochs=3, min_steps=5)


def test_more_cpu_processes_than_cores_warns_with_both_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.warns(UserWarning, match=r"devices=64 on accelerator='cpu' starts 64 processes, but this machine "
                                         r"lets this program use 2 CPU core\(s\).*Fix: devices=2 or fewer"):
        assert CPUAccelerator.parse_devices(64) == list(range(64))
    for variable, value in (("LOCAL_RANK", "3"), ("LOCAL_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "64")):
        # the ranks a launcher started do not repeat it, nor do processes torchrun (LOCAL_RANK=0 too) or mpirun
        # started: this process starts none, and "starts 64 processes" would be false
        monkeypatch.delenv("LOCAL_RANK", raising=False)
        monkeypatch.setenv(variable, value)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            CPUAccelerator.parse_devices(64)
        monkeypatch.delenv(variable)


def test_more_devices_than_an_accelerator_has_stays_an_error() -> None:
    class TwoChips(Accelerator):  # a test double: a device type this machine does not have
        name: ClassVar[str] = "two_chips"
        device_type: ClassVar[str] = "meta"

        @classmethod
        def is_available(cls) -> bool:
            return True

        @classmethod
        def device_count(cls) -> int:
            return 2

    with pytest.raises(ConfigError, match=r"devices=4: asks for 4 two_chips device\(s\) but this machine has 2") as e:
        TwoChips.parse_devices(4)
    assert "Fix: write devices=2 or fewer" in str(e.value)


@pytest.mark.parametrize("argument", ["limit_train_batches", "limit_val_batches"])
def test_a_fraction_that_leaves_no_batch_is_refused(tmp_path: Path, argument: str) -> None:
    started = Started()
    with pytest.raises(ConfigError, match=rf"{argument}=0.01: of a dataloader of 8 batches is 0 batches") as info:
        _trainer(tmp_path, callbacks=[started], **{argument: 0.01}).fit(TinyClassifier(), _loader(64, 8),
                                                                        _loader(64, 8))
    assert f"Fix: write {argument}=0.125 or more (1 batch)" in str(info.value)
    assert not started.started


def test_no_training_batches_on_purpose_warns() -> None:
    with pytest.warns(UserWarning, match=re.escape("limit_train_batches=0: fit will not train at all")):
        Trainer(accelerator="cpu", logger=False, limit_train_batches=0)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_a_clip_value_that_is_not_finite_is_refused(value: float) -> None:
    with pytest.raises(ConfigError, match=r"gradient_clip_val=.*: must be a finite non-negative number or None"):
        Trainer(accelerator="cpu", logger=False, gradient_clip_val=value)


@pytest.mark.parametrize("switch", ["enable_checkpointing", "enable_progress_bar", "enable_model_summary",
                                    "use_distributed_sampler", "inference_mode"])
def test_a_switch_that_is_not_a_bool_is_refused(switch: str) -> None:
    with pytest.raises(ConfigError, match=rf"{switch}='false': must be True or False.*Fix: write {switch}=True"):
        Trainer(accelerator="cpu", logger=False, **{switch: "false"})


def test_a_stream_that_yields_nothing_is_refused_after_its_first_epoch(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_epochs=2)
    with pytest.raises(ConfigError, match=r"train_dataloaders=<DataLoader over _Stream: no length.*yielded no batch "
                                          r"in its first epoch"):
        trainer.fit(TinyClassifier(), DataLoader(_Stream(0), batch_size=8))
    assert trainer.global_step == 0 and trainer.current_epoch == 0
