"""EarlyStopping as Lightning 2.6's: why it stopped (``stopping_reason``, kept across a resume), a signed ``min_delta``,
when it checks by default, and never during ``validate``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import EarlyStopping, Trainer
from xtrain.core.callbacks import EarlyStoppingReason
from xtrain.core.testing import TinyClassifier, tiny_loaders


class Scripted(TinyClassifier):
    """Logs ``score`` = the next value of ``values`` at each validation (one per epoch)."""

    def __init__(self, values: list[float]) -> None:
        super().__init__()
        self.values = values
        self.checks = 0

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.log("score", self.values[min(self.checks, len(self.values) - 1)])
            self.checks += 1


def _fit(values: list[float], root: Path, **options: Any) -> tuple[EarlyStopping, Trainer]:
    stop = EarlyStopping("score", **options)
    train, val = tiny_loaders(n=64)
    trainer = Trainer(max_epochs=len(values) + 3, callbacks=[stop], logger=False, enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=root)
    trainer.fit(Scripted(values), train, val)
    return stop, trainer


@pytest.mark.parametrize(("values", "options", "reason", "epochs", "words"), [
    ([3.0, 2.0, 2.5, 2.4], {"patience": 2}, EarlyStoppingReason.PATIENCE_EXHAUSTED, 4, "did not improve for 2"),
    ([3.0, 1.0], {"stopping_threshold": 1.5}, EarlyStoppingReason.STOPPING_THRESHOLD, 2, "stopping threshold"),
    ([3.0, 9.0], {"divergence_threshold": 5.0}, EarlyStoppingReason.DIVERGENCE_THRESHOLD, 2, "divergence"),
    ([3.0, math.nan], {}, EarlyStoppingReason.NON_FINITE_METRIC, 2, "not finite"),
    ([0.3, 0.5], {"mode": "max", "stopping_threshold": 0.4}, EarlyStoppingReason.STOPPING_THRESHOLD, 2, "threshold"),
])
def test_each_rule_names_itself(values: list[float], options: dict[str, Any], reason: EarlyStoppingReason,
                                epochs: int, words: str, tmp_path: Path) -> None:
    stop, trainer = _fit(values, tmp_path, **options)
    assert trainer.current_epoch == epochs
    assert stop.stopping_reason is reason
    assert stop.stopping_reason_message is not None and words in stop.stopping_reason_message
    assert stop.stop_reason == stop.stopping_reason_message  # the release-1 name reads the same message


def test_not_stopped_and_a_threshold_equal_to_the_metric_does_not_stop(tmp_path: Path) -> None:
    # As Lightning (torch.lt / torch.gt): a value equal to stopping_threshold has not passed it.
    stop, trainer = _fit([2.0, 1.0, 0.9], tmp_path, stopping_threshold=1.0, patience=10)
    assert trainer.current_epoch == 3  # stopped at 0.9 (epoch 2), not at 1.0 == the threshold (epoch 1)
    assert stop.stopping_reason is EarlyStoppingReason.STOPPING_THRESHOLD and stop.stopped_epoch == 2
    fresh, _ = _fit([3.0, 2.0, 1.0], tmp_path / "b", patience=10)
    assert fresh.stopping_reason is EarlyStoppingReason.NOT_STOPPED and fresh.stopping_reason_message is None
    assert fresh.stop_reason == ""


def test_the_reason_is_saved_and_restored(tmp_path: Path) -> None:
    stop, trainer = _fit([3.0, 2.0, 2.5, 2.4], tmp_path, patience=2)
    ckpt = torch.load(trainer.checkpoint_callback.last_model_path, weights_only=True)
    state = next(v for k, v in ckpt["callbacks"].items() if k.startswith("EarlyStopping"))
    assert state["stopping_reason"] == EarlyStoppingReason.PATIENCE_EXHAUSTED.value == 3  # Lightning's value
    assert state["stopping_reason_message"] == stop.stopping_reason_message
    again = EarlyStopping("score")
    again.load_state_dict(state)
    assert again.stopping_reason is EarlyStoppingReason.PATIENCE_EXHAUSTED
    assert again.stopping_reason_message == stop.stopping_reason_message
    older = {k: v for k, v in state.items() if not k.startswith("stopping_reason")}  # a release-1 checkpoint
    again = EarlyStopping("score")
    again.load_state_dict({**older, "stopping_reason": 99})
    assert again.stopping_reason is EarlyStoppingReason.NOT_STOPPED and again.stopping_reason_message is None


def test_a_negative_min_delta_accepts_a_slightly_worse_result(tmp_path: Path) -> None:
    # Lightning 2.6.6 on these values: stopped_epoch 6, best 0.73 (xtrain took |min_delta| and stopped at epoch 3).
    stop, _ = _fit([1.0, 0.8, 0.75, 0.74, 0.745, 0.73, 0.9], tmp_path, patience=1, min_delta=-0.01)
    assert stop.stopped_epoch == 6 and stop.best_score.item() == pytest.approx(0.73)
    assert stop.stopping_reason is EarlyStoppingReason.PATIENCE_EXHAUSTED
    strict, _ = _fit([1.0, 0.8, 0.75, 0.74, 0.745, 0.73, 0.9], tmp_path / "b", patience=1, min_delta=0.01)
    assert strict.stopped_epoch == 3  # a positive min_delta: 0.74 is not 0.01 better than 0.75


class TrainScripted(TinyClassifier):
    """Logs ``tm`` = the next value of ``values`` in every training step of an epoch (``on_epoch``: its mean)."""

    def __init__(self, values: list[float]) -> None:
        super().__init__()
        self.values = values

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        value = self.values[min(self.current_epoch, len(self.values) - 1)]
        self.log("tm", value, on_step=False, on_epoch=True)
        return super().training_step(batch, batch_idx)


def test_a_training_metric_is_watched_at_the_epoch_end_by_default_with_validation(tmp_path: Path) -> None:
    """Validating once an epoch, the default checks at the training epoch's end, as Lightning's: a metric logged in
    training_step can be monitored (it was a ConfigError 'was never logged', checked after validation)."""
    stop = EarlyStopping("tm", patience=1)
    train, val = tiny_loaders(n=64)
    trainer = Trainer(max_epochs=8, callbacks=[stop], logger=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(TrainScripted([3.0, 2.0, 2.5, 1.0]), train, val)
    assert stop.stopped_epoch == 2 and trainer.current_epoch == 3
    # Validating twice an epoch, it checks after each validation (Lightning's rule), where "tm" is not there yet.
    stop = EarlyStopping("val_loss", patience=100)
    trainer = Trainer(max_epochs=2, val_check_interval=0.5, callbacks=[stop], logger=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path / "b")
    checks: list[int] = []
    original = stop._check
    stop._check = lambda t: (checks.append(t.global_step), original(t))[1]  # type: ignore[method-assign]
    trainer.fit(TinyClassifier(), train, val)
    assert checks == [2, 4, 6, 8]


def test_validate_never_checks(tmp_path: Path) -> None:
    stop = EarlyStopping("missing_metric")  # strict: checking would raise
    _, val = tiny_loaders(n=64)
    trainer = Trainer(callbacks=[stop], logger=False, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)
    trainer.validate(TinyClassifier(), val)
    assert stop.wait_count == 0 and stop.stopping_reason is EarlyStoppingReason.NOT_STOPPED
