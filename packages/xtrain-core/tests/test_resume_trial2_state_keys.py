"""Two stateful callbacks with one ``state_key`` are refused (they silently shared one saved state)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import Callback, Trainer, seed_everything
from xtrain.core.callbacks import EarlyStopping, ModelCheckpoint
from xtrain.core.errors import ConfigError
from xtrain.core.testing import TinyClassifier, tiny_loaders


class Counter(Callback):
    def __init__(self, step: int = 1) -> None:
        self.step, self.n = step, 0

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        self.n += self.step

    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n = state["n"]


class KeyedCounter(Counter):
    @property
    def state_key(self) -> str:
        return self._generate_state_key(step=self.step)


class Quiet(Callback):
    """Overrides state_dict only to say it keeps nothing."""

    def state_dict(self) -> dict[str, Any]:
        return {}


def _trainer(root: Path, callbacks: list[Callback], **kwargs: Any) -> Trainer:
    options: dict[str, Any] = {"max_steps": 4, "logger": False, "enable_progress_bar": False,
                               "enable_model_summary": False}
    return Trainer(default_root_dir=root, callbacks=callbacks, **{**options, **kwargs})


def test_two_stateful_callbacks_with_one_state_key_are_refused_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"(?s)callbacks=\['Counter', 'Counter'\]: .*stateful callback of type "
                                          r"Counter with state_key 'Counter'.*Fix: give each a distinct state_key"):
        _trainer(tmp_path, [Counter(1), Counter(100)])


def test_distinct_keys_stateless_namesakes_and_differently_monitored_builtins_are_allowed(tmp_path: Path) -> None:
    _trainer(tmp_path, [Callback(), Callback(), Quiet(), Quiet()])
    _trainer(tmp_path, [ModelCheckpoint(monitor="val_loss"), ModelCheckpoint(monitor="train_loss"),
                        EarlyStopping(monitor="val_loss"), EarlyStopping(monitor="train_loss")])
    with pytest.raises(ConfigError, match="state_key 'ModelCheckpoint"):
        _trainer(tmp_path, [ModelCheckpoint(monitor="val_loss"), ModelCheckpoint(monitor="val_loss")])
    seed_everything(0)
    first, second = KeyedCounter(1), KeyedCounter(100)
    _trainer(tmp_path, [first, second]).fit(TinyClassifier(), tiny_loaders(n=64)[0])
    states = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["callbacks"]
    assert states["KeyedCounter{'step': 1}"] == {"n": 4} and states["KeyedCounter{'step': 100}"] == {"n": 400}
    again = [KeyedCounter(1), KeyedCounter(100)]
    _trainer(tmp_path, again, max_steps=5).fit(TinyClassifier(), tiny_loaders(n=64)[0], ckpt_path="last")
    assert [cb.n for cb in again] == [5, 500]


class _WithCallbacks(TinyClassifier):
    def configure_callbacks(self) -> list[Any]:
        return [Counter(1), Counter(100)]


def test_a_shared_state_key_from_configure_callbacks_is_refused_before_it_is_saved_or_loaded(tmp_path: Path) -> None:
    seed_everything(0)
    _trainer(tmp_path, [Counter()]).fit(TinyClassifier(), tiny_loaders(n=64)[0])
    module = _WithCallbacks()
    weights = [p.detach().clone() for p in module.parameters()]
    with pytest.raises(ConfigError, match="state_key 'Counter'"):
        _trainer(tmp_path, []).fit(module, tiny_loaders(n=64)[0], ckpt_path="last")
    assert all(torch.equal(a, b) for a, b in zip(weights, module.parameters(), strict=True))
    with pytest.raises(ConfigError, match="state_key 'Counter'"):
        _trainer(tmp_path / "fresh", []).fit(_WithCallbacks(), tiny_loaders(n=64)[0])
    assert not (tmp_path / "fresh" / "checkpoints" / "last.ckpt").exists()
