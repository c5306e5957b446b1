"""Trial H: runs that could make no progress end with an error, and their messages name what the user wrote."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from xtrain.core import Callback, Trainer, TrainModule
from xtrain.core.errors import ConfigError, NonFiniteLossError
from xtrain.core.testing import TinyClassifier, tiny_loaders


def _trainer(tmp_path: Path, **kwargs: Any) -> Trainer:
    options: dict[str, Any] = {"accelerator": "cpu", "devices": 1, "default_root_dir": tmp_path, "logger": False,
                               "enable_progress_bar": False, "enable_model_summary": False,
                               "enable_checkpointing": False, "num_sanity_val_steps": 0}
    return Trainer(**{**options, **kwargs})


class _Hang(Callback):
    """Fails the test instead of letting a run that loops over empty epochs spin forever."""

    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule) -> None:
        if trainer.current_epoch >= 20:
            raise AssertionError(f"still running at epoch {trainer.current_epoch}, global_step {trainer.global_step}")


class _Stream(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, n: int, *, once: bool = False) -> None:
        self.n = n
        self._items = iter(self._make()) if once else None  # once: a used-up iterator after the first pass

    def _make(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(0)
        return [(torch.randn(16, generator=g), torch.randint(0, 4, (), generator=g)) for _ in range(self.n)]

    def __iter__(self) -> Any:
        return self._items if self._items is not None else iter(self._make())


class _Diverging(TinyClassifier):
    """A non-finite loss at every batch index in ``bad`` (``None``: every batch)."""

    def __init__(self, bad: set[int] | None = None) -> None:
        super().__init__()
        self.bad = bad

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        return loss * math.nan if self.bad is None or batch_idx in self.bad else loss


def _loader(n: int) -> DataLoader[Any]:
    return DataLoader(TensorDataset(torch.randn(n, 16), torch.randint(0, 4, (n,))), batch_size=4)


# -- #2: an empty stream ---------------------------------------------------------------------------------------
def test_an_empty_stream_with_max_steps_is_refused_after_its_first_epoch(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_steps=5, callbacks=[_Hang()])
    with pytest.raises(ConfigError, match=r"train_dataloaders=<DataLoader over _Stream: no length, batch_size=8.*"
                                          r"yielded no batch in its first epoch.*Fix: ") as info:
        trainer.fit(TinyClassifier(), DataLoader(_Stream(0), batch_size=8))
    assert "loop over empty epochs forever" in str(info.value)
    assert trainer.current_epoch == 0


def test_a_stream_used_up_after_one_pass_stops_the_fit_when_it_runs_dry(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_steps=100, callbacks=[_Hang()])
    with pytest.warns(UserWarning, match=r"yielded no batch in epoch 1, after 2 batches in earlier epochs: its "
                                         r"__iter__ does not start over.*Training stops here\. Fix: make __iter__"):
        trainer.fit(TinyClassifier(), DataLoader(_Stream(16, once=True), batch_size=8))
    assert trainer.global_step == 2 and trainer.current_epoch <= 2


def test_an_epoch_ended_by_on_train_batch_start_is_not_called_empty(tmp_path: Path) -> None:
    class SkipsEpochs(TinyClassifier):
        def on_train_batch_start(self, batch: Any, batch_idx: int) -> int:
            return -1  # skip the rest of the epoch on purpose

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*yielded no batch")
        _trainer(tmp_path, max_epochs=2).fit(SkipsEpochs(), tiny_loaders()[0])


# -- #3: on_nonfinite_loss="skip" that skips everything ----------------------------------------------------------
@pytest.mark.parametrize("limits", [{"max_steps": 5}, {"max_epochs": 3}])
def test_skip_that_skips_a_whole_epoch_ends_the_run(tmp_path: Path, limits: dict[str, int]) -> None:
    trainer = _trainer(tmp_path, on_nonfinite_loss="skip", enable_checkpointing=True, callbacks=[_Hang()], **limits)
    with pytest.warns(UserWarning, match="non-finite"), \
            pytest.raises(NonFiniteLossError, match=r"skipped 16 of the 16 batches of epoch 0 .*took no optimizer "
                                                    r"step.*The first was at step 0 \(epoch 0, batch 0\)"):
        trainer.fit(_Diverging(), tiny_loaders()[0])
    assert trainer.global_step == 0
    assert not list(tmp_path.rglob("*.ckpt"))  # no checkpoint of weights that never trained


def test_a_fit_that_skipped_batches_ends_with_their_count(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_epochs=2, on_nonfinite_loss="skip")
    with pytest.warns(UserWarning, match="non-finite") as record:
        trainer.fit(_Diverging({1, 5}), tiny_loaders()[0])
    messages = [str(w.message) for w in record]
    assert len([m for m in messages if "the training loss is non-finite" in m]) == 1  # the per-step warning: once
    summary = [m for m in messages if "skipped 4 of 32 steps" in m]
    assert len(summary) == 1, messages
    assert "global_step 28" in summary[0] and "at step 1 (epoch 0, batch 1)" in summary[0]
    assert trainer.global_step == 28


# -- #6: manual optimization ---------------------------------------------------------------------------------------
class _Manual(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        optimizer: Any = self.optimizers()
        loss = super().training_step(batch, batch_idx)
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss


@pytest.mark.parametrize("mode", ["raise", "skip"])
def test_manual_optimization_warns_that_the_setting_is_not_applied(tmp_path: Path, mode: str) -> None:
    with pytest.warns(UserWarning, match=rf"on_nonfinite_loss='{mode}' is not applied under manual optimization "
                                         r".*before self.manual_backward\(loss\)") as record:
        _trainer(tmp_path, max_steps=2, on_nonfinite_loss=mode).fit(_Manual(), tiny_loaders()[0])
    assert len([w for w in record if "not applied under manual" in str(w.message)]) == 1


# -- #8 / #9: messages name the argument the user wrote --------------------------------------------------------------
def test_a_tiny_overfit_batches_is_named_as_overfit_batches(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^overfit_batches=0.0001: .*Fix: write overfit_batches=") as info:
        _trainer(tmp_path, max_epochs=1, overfit_batches=0.0001).fit(TinyClassifier(), _loader(32))
    assert "limit_train_batches" not in str(info.value)


@pytest.mark.parametrize(("loaders", "name"), [
    (lambda: [_loader(32), _loader(0)], "train_dataloaders[1]"),
    (lambda: {"a": _loader(32), "b": _loader(0)}, "train_dataloaders['b']"),
])
def test_the_empty_one_of_several_train_loaders_is_named(tmp_path: Path, loaders: Any, name: str) -> None:
    with pytest.raises(ConfigError) as info:
        _trainer(tmp_path, max_epochs=1).fit(TinyClassifier(), loaders())
    assert str(info.value).startswith(f"{name}=<DataLoader over TensorDataset: len=0, batch_size=4, drop_last=False>: "
                                      f"the training dataset is empty")


# -- #13 / #16 / #15: advice fitted to the settings ----------------------------------------------------------------
def test_raise_does_not_advise_detect_anomaly_when_it_is_on(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_epochs=1, on_nonfinite_loss="raise", detect_anomaly=True)
    with pytest.raises(NonFiniteLossError) as info:
        trainer.fit(_Diverging({3}), tiny_loaders()[0])
    message = str(info.value)
    assert "detect_anomaly=True names the operation" not in message
    assert "detect_anomaly=True is on but cannot name the operation" in message
    assert "run once with on_nonfinite_loss='warn' and detect_anomaly=True" in message


def _skip_warning(tmp_path: Path, bad: int, **kwargs: Any) -> str:
    """The "skip" warning of a one-epoch fit whose batch ``bad`` has a non-finite loss."""
    with pytest.warns(UserWarning, match="non-finite") as record:
        _trainer(tmp_path, max_epochs=1, on_nonfinite_loss="skip", **kwargs).fit(_Diverging({bad}),
                                                                                 tiny_loaders()[0])
    return next(str(w.message) for w in record if "the training loss is non-finite" in str(w.message))


def test_skip_does_not_advise_clipping_when_it_is_on(tmp_path: Path) -> None:
    message = _skip_warning(tmp_path, 3, gradient_clip_val=1.0)
    assert "clip gradients (gradient_clip_val)" not in message
    assert "Lower the learning rate or gradient_clip_val (clipping is already on, at 1.0)" in message


def test_skip_under_accumulation_says_what_it_skips(tmp_path: Path) -> None:
    message = _skip_warning(tmp_path, 5, accumulate_grad_batches=4)
    assert "that step's backward and optimizer step" not in message
    assert ("skips that batch's backward; with accumulate_grad_batches=4 its window still takes the optimizer step "
            "on its other batches") in message
    assert "window's last: then the window takes no step" in message
