"""A refused callback state whose own rollback fails: every other state is still put back, and the error says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from xtrain.core import Callback, CheckpointError, Trainer
from xtrain.core._internal.restore_apply import roll_back
from xtrain.core.testing import TinyClassifier, tiny_loaders


class Counter(Callback):
    def __init__(self) -> None:
        self.n = 0

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        self.n += 1

    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n = state["n"]


class Best(Callback):
    """``state_dict()`` is ``{}`` until it tracked something; ``load_state_dict`` needs a float ``best``."""

    def __init__(self, damage: bool = False) -> None:
        self.best: Any = None
        self.damage = damage

    def on_train_end(self, *args: Any) -> None:
        if self.damage:
            self.best = "oops"

    def state_dict(self) -> dict[str, Any]:
        return {} if self.best is None else {"best": self.best}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state["best"], float):
            raise ValueError(f"best must be a float, got {state['best']!r}")
        self.best = state["best"]


def _trainer(root: Path, callbacks: list[Callback], steps: int) -> Trainer:
    return Trainer(default_root_dir=root, max_steps=steps, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, callbacks=callbacks)


def test_a_failed_rollback_still_puts_the_other_states_back_and_is_named(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path / "a", [Counter(), Best(damage=True)], 4)
    trainer.fit(TinyClassifier(), tiny_loaders(n=64)[0])
    path = tmp_path / "x.ckpt"
    trainer.save_checkpoint(path)
    counter, best = Counter(), Best()
    with pytest.raises(CheckpointError, match=r"x\.ckpt.*callback 'Best' refused its saved state \(ValueError: best "
                                              r"must be a float.*putting back the state of callback 'Best' \(KeyError"):
        _trainer(tmp_path / "b", [counter, best], 8).fit(TinyClassifier(), tiny_loaders(n=64)[0],
                                                         ckpt_path=str(path))
    assert counter.n == 0  # loaded before Best, put back although Best's own rollback failed


def test_roll_back_runs_every_step_and_names_the_failures() -> None:
    ran: list[str] = []

    def broken() -> None:
        ran.append("broken")
        raise KeyError("best")

    failed = roll_back([("first", lambda: ran.append("first")), ("broken", broken),
                        ("last", lambda: ran.append("last"))])
    assert ran == ["last", "broken", "first"]
    assert failed == ["broken (KeyError: 'best')"]
