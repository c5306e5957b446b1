"""When the fit loop releases gradients: right after the optimizer step when no batch hook can read them (faster, lower
peak memory), else just before the next backward pass, as Lightning. Either way the weights are the same."""

from __future__ import annotations

import types
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


class Net(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class Blind(Callback):
    """Declares that its batch hooks never read gradients (they record them anyway, to show what they would see).

    ``batch_start`` is what the batch's ``training_step`` finds: nothing runs between the two. (A probe inside the
    module would make the module a reader.)"""

    reads_gradients: ClassVar[bool] = False

    def __init__(self) -> None:
        self.batch_start: list[bool] = []
        self.batch_end: list[bool] = []
        self.epoch_end: list[bool] = []

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self.batch_start.append(module.net.weight.grad is not None)

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batch_end.append(module.net.weight.grad is not None)

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self.epoch_end.append(module.net.weight.grad is not None)


class Reader(Blind):
    reads_gradients: ClassVar[bool] = True


def fit(callbacks: list[Callback], module: Net | None = None, **options: Any) -> Net:
    module = Net() if module is None else module
    Trainer(callbacks=callbacks, **{**QUIET, "max_epochs": 2, **options}).fit(module, loader())
    return module


def test_released_after_the_step_when_no_batch_hook_reads_them() -> None:
    blind = Blind()
    fit([blind])
    assert blind.batch_end == [False, False, False, True] * 2  # the epoch's last step keeps them
    assert blind.epoch_end == [True, True]  # so epoch-end hooks see them, as in Lightning
    assert blind.batch_start == [False, False, False, False, True, False, False, False]


def test_kept_as_lightning_when_a_batch_hook_may_read_them() -> None:
    reader = Reader()
    fit([reader])
    assert reader.batch_end == [True] * 8
    assert reader.epoch_end == [True, True]
    assert reader.batch_start == [False] + [True] * 7


def test_a_module_batch_hook_counts_as_a_reader() -> None:
    class Hooked(Net):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.seen = self.net.weight.grad is not None

    blind = Blind()
    fit([blind], Hooked(), max_epochs=1)
    assert blind.batch_start == [False, True, True, True]


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
        blind = Blind()
        fit([blind], cls(), max_epochs=1)
        assert blind.batch_start == [False, True, True, True], cls.__name__


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

    class ReadsTheProperty(InAProperty):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.seen = self.last_norm
            return super().training_step(batch, batch_idx)

    class InForward(Net):
        def forward(self, x: torch.Tensor) -> torch.Tensor:  # called as self(x), by no name
            self.seen = [p.grad for p in self.parameters()]
            return self.net(x)

    class WhileFresh(Net):  # Lightning's grad_norm idiom: the step's own gradients, before the step
        def on_before_optimizer_step(self, optimizer: Any) -> None:
            self.norms = [float(p.grad.norm()) for p in self.parameters()]

        def on_after_backward(self) -> None:
            self.after = torch.autograd.grad is not None

    class AtEpochEnd(Net):  # the epoch's last step keeps its gradients for these hooks anyway
        def on_train_epoch_end(self) -> None:
            self.norms = [p.grad for p in self.parameters()]

    assert not module_reads_gradients(Net())
    assert not module_reads_gradients(Plain())
    assert not module_reads_gradients(InAProperty())  # defined, never used between the step and the next backward
    assert module_reads_gradients(ReadsTheProperty())
    assert module_reads_gradients(InForward())
    assert not module_reads_gradients(WhileFresh())
    assert not module_reads_gradients(AtEpochEnd())


def test_a_module_that_reads_gradients_only_while_they_are_fresh_releases_them_early() -> None:
    class WhileFresh(Net):
        def on_before_optimizer_step(self, optimizer: Any) -> None:
            self.norms = [float(p.grad.norm()) for p in self.parameters()]

    blind = Blind()
    module = fit([blind], WhileFresh(), max_epochs=1)
    assert blind.batch_start == [False, False, False, False]  # released after each step
    assert len(module.norms) == 2  # and the hook saw the step's own gradients


def previous_norm(module: TrainModule) -> float:
    """A diagnostic helper outside the module's class, as scripts keep in their own files."""
    return sum(float(p.grad.norm()) for p in module.parameters() if p.grad is not None)


def countdown(n: int) -> int:  # recursive, and reads nothing: the reading must end
    return n if n <= 0 else countdown(n - 1)


def test_user_code_the_module_calls_is_read_too(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from xtrain.core._internal.gradient_readers import module_reads_gradients

    (tmp_path / "grad_helpers.py").write_text(
        "def log_stats(module):\n    return [p.grad for p in module.parameters()]\n\n"
        "class Tracker:\n    @staticmethod\n    def update(module):\n        return log_stats(module)\n\n"
        "def quiet(module):\n    return 0\n\n"
        "def __getattr__(name):  # a lazy module: the scan must not trigger it\n    raise ImportError(name)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    helpers = importlib.import_module("grad_helpers")
    Tracker = helpers.Tracker

    class ViaFunction(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.previous = previous_norm(self)
            return super().training_step(batch, batch_idx)

    class ViaModule(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            helpers.log_stats(self)
            return super().training_step(batch, batch_idx)

    class ViaClass(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            Tracker.update(self)
            return super().training_step(batch, batch_idx)

    class Blameless(Net):  # user code and libraries that read no gradient of the user's
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            countdown(3)
            torch.nn.utils.clip_grad_norm_([], 1.0)
            return super().training_step(batch, batch_idx)

    class QuietViaModule(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            helpers.quiet(self)
            return super().training_step(batch, batch_idx)

    for cls in (ViaFunction, ViaModule, ViaClass):
        assert module_reads_gradients(cls()), cls.__name__
        blind = Blind()
        fit([blind], cls(), max_epochs=1)
        assert blind.batch_start == [False, True, True, True], cls.__name__
    assert not module_reads_gradients(Blameless())
    assert not module_reads_gradients(QuietViaModule())


class GradTracker:
    def update(self, module: TrainModule) -> list[Any]:
        return [p.grad for p in module.parameters()]


def test_objects_the_module_holds_are_read_too() -> None:
    from xtrain.core._internal.gradient_readers import module_reads_gradients

    class Holds(Net):
        def __init__(self) -> None:
            super().__init__()
            self.tracker = GradTracker()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.tracker.update(self)  # "tracker" is an attribute: only the held object's class shows the read
            return super().training_step(batch, batch_idx)

    assert module_reads_gradients(Holds())
    assert not module_reads_gradients(Net())


def test_decorated_and_instance_level_methods_are_read() -> None:
    from xtrain.core._internal.gradient_readers import module_reads_gradients

    def reads(module: TrainModule) -> list[Any]:
        return [p.grad for p in module.parameters()]

    class Decorated(Net):
        @torch.no_grad()  # a library's wrapper: what it wraps is read
        def stats(self) -> list[Any]:
            return reads(self)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.stats()
            return super().training_step(batch, batch_idx)

    class PerInstance(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.hook()
            return super().training_step(batch, batch_idx)

    per_instance = PerInstance()
    per_instance.hook = lambda: reads(per_instance)  # a function set on the instance, not the class

    def patched_step(self: Net, batch: Any, batch_idx: int) -> torch.Tensor:
        reads(self)
        return Net.training_step(self, batch, batch_idx)

    patched = Net()
    patched.training_step = types.MethodType(patched_step, patched)  # shadows the class's training_step
    assert module_reads_gradients(Decorated())
    assert module_reads_gradients(per_instance)
    assert module_reads_gradients(patched)
