"""ddp_spawn chooses its rendezvous port before the ranks start; another process may take it in between (two test
workers, two notebooks on one machine): the launch is tried again on another port instead of failing."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

import xtrain.strategies.launchers.multiprocessing as spawn_launcher
from xtrain.core import Trainer
from xtrain.core.testing import TinyClassifier, tiny_loaders


@pytest.fixture
def taken_port() -> Iterator[int]:
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.bind(("", 0))
    busy.listen()
    try:
        yield busy.getsockname()[1]
    finally:
        busy.close()


@pytest.mark.timeout(240)
def test_a_rendezvous_port_taken_meanwhile_is_replaced(tmp_path: Path, taken_port: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MASTER_PORT", raising=False)
    chosen: list[int] = []
    real = spawn_launcher.find_free_port

    def first_the_taken_one() -> int:
        chosen.append(taken_port if not chosen else real())
        return chosen[-1]

    monkeypatch.setattr(spawn_launcher, "find_free_port", first_the_taken_one)
    trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_steps=2, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)
    trainer.fit(TinyClassifier(), tiny_loaders()[0])
    assert trainer.global_step == 2
    assert chosen[0] == taken_port and len(chosen) == 2
