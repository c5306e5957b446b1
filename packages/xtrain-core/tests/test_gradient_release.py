"""When the fit loop releases gradients: right after the optimizer step when no batch hook can read them (faster, lower
peak memory), else just before the next backward pass, as Lightning. Either way the weights are the same."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import Trainer, TrainModule
from xtrain.core.callbacks import Callback, ProgressBar

QUIET: dict[str, Any] = {"accelerator": "cpu", "logger": False, "enable_checkpointing": False,
                         "enable_progress_bar": False, "enable_model_summary": False, "limit_val_batches": 0}


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def loader() -> DataLoader[Any]:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(32, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)  # 4 batches an epoch


def has_grad(parameter: torch.Tensor) -> bool:
    return parameter.grad is not None


class Net(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 1)
        self.at_step: list[bool] = []  # whether training_step found the previous step's gradients

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.at_step.append(has_grad(self.net.weight))  # through a function outside the class: not seen by the scan
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class Blind(Callback):
    """Declares that its batch hook never reads gradients (it records them anyway, to show what it would see)."""

    reads_gradients: ClassVar[bool] = False

    def __init__(self) -> None:
        self.batch_end: list[bool] = []
        self.epoch_end: list[bool] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batch_end.append(module.net.weight.grad is not None)

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self.epoch_end.append(module.net.weight.grad is not None)


class Reader(Blind):
    reads_gradients: ClassVar[bool] = True


def fit(callbacks: list[Callback], **options: Any) -> Net:
    module = Net()
    Trainer(max_epochs=2, callbacks=callbacks, **{**QUIET, **options}).fit(module, loader())
    return module


def test_released_after_the_step_when_no_batch_hook_reads_them() -> None:
    blind = Blind()
    module = fit([blind])
    assert blind.batch_end == [False, False, False, True] * 2  # the epoch's last step keeps them
    assert blind.epoch_end == [True, True]  # so epoch-end hooks see them, as in Lightning
    assert module.at_step == [False, False, False, False, True, False, False, False]


def test_kept_as_lightning_when_a_batch_hook_may_read_them() -> None:
    reader = Reader()
    module = fit([reader])
    assert reader.batch_end == [True] * 8
    assert reader.epoch_end == [True, True]
    assert module.at_step == [False] + [True] * 7


def test_a_module_batch_hook_counts_as_a_reader() -> None:
    class Hooked(Net):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.seen = self.net.weight.grad is not None

    module = Hooked()
    Trainer(max_epochs=1, **QUIET).fit(module, loader())
    assert module.at_step == [False, True, True, True]


def test_the_weights_do_not_depend_on_when_gradients_are_released() -> None:
    early, lightning = fit([Blind(), ProgressBar()]), fit([Reader()])
    assert torch.equal(early.net.weight, lightning.net.weight)
    assert torch.equal(early.net.bias, lightning.net.bias)


def test_accumulation_and_training_step_returning_none_keep_lightnings_order() -> None:
    blind = Blind()
    fit([blind], accumulate_grad_batches=2)
    assert blind.batch_end == [True] * 8  # mid-window gradients must survive, so nothing is released early

    class SometimesNone(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
            loss = super().training_step(batch, batch_idx)
            return None if batch_idx == 1 else loss

    module, released = SometimesNone(), SometimesNone()
    Trainer(max_epochs=1, callbacks=[Reader()], **QUIET).fit(module, loader())
    Trainer(max_epochs=1, callbacks=[Blind()], **QUIET).fit(released, loader())
    assert torch.equal(module.net.weight, released.net.weight)  # the None step updates nothing either way


def test_the_runs_last_step_keeps_them_for_code_after_fit() -> None:
    module = Net()
    Trainer(max_steps=6, callbacks=[Blind()], **QUIET).fit(module, loader())  # stops mid-epoch
    assert module.net.weight.grad is not None


def test_a_module_whose_code_reads_grad_keeps_lightnings_order() -> None:
    class Inspects(Net):  # a diagnostic print of the previous step's gradient, as real scripts do
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.previous = None if self.net.bias.grad is None else float(self.net.bias.grad.norm())
            return super().training_step(batch, batch_idx)

    class ThroughAHelper(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.norm = self._norm()
            return super().training_step(batch, batch_idx)

        def _norm(self) -> float:
            return sum(float(p.grad.norm()) for p in self.parameters() if p.grad is not None)

    for cls in (Inspects, ThroughAHelper):
        module = cls()
        Trainer(max_epochs=1, callbacks=[Blind()], **QUIET).fit(module, loader())
        assert module.at_step == [False, True, True, True], cls.__name__


def test_what_counts_as_naming_grad() -> None:
    from xtrain.core._internal.gradient_readers import module_reads_gradients

    class Plain(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            with torch.no_grad():  # no_grad, requires_grad, zero_grad: other names
                self.net.weight.requires_grad_(True)
            return super().training_step(batch, batch_idx)

    class InAProperty(Net):
        @property
        def last_norm(self) -> float:
            return float(self.net.weight.grad.norm())

    class InAComprehension(Net):
        def on_train_epoch_end(self) -> None:
            self.norms = [p.grad for p in self.parameters()]

    assert not module_reads_gradients(Net())
    assert not module_reads_gradients(Plain())
    assert module_reads_gradients(InAProperty())
    assert module_reads_gradients(InAComprehension())
