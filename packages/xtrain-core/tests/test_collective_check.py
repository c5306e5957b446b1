"""The collective check in one process: two threads play two ranks on a real ``torch.distributed`` HashStore."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
import torch.distributed as dist

from xtrain.core._internal.collective_check import ENV, CollectiveCheck, collective_check_enabled
from xtrain.core._internal.progress_signal import ProgressSignal
from xtrain.core.errors import CollectiveMismatchError, ConfigError


def _two_ranks(calls: dict[int, list[tuple[str, Any]]]) -> dict[int, BaseException | int]:
    """Run each rank's collectives through its own signal and checker; returns the error or count per rank."""
    store = dist.HashStore()
    results: dict[int, BaseException | int] = {}

    def rank(r: int) -> None:
        signal = ProgressSignal()
        signal.checker = CollectiveCheck(store, rank=r, world_size=2)
        try:
            for name, tensor in calls[r]:
                with signal.collective(name, tensor):
                    pass
            results[r] = signal.collectives
        except CollectiveMismatchError as err:
            assert signal.depth == 0  # __exit__ does not run after a failed __enter__: the depth is restored
            results[r] = err

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_matching_collectives_pass() -> None:
    calls = [("all_reduce", torch.ones(3)), ("barrier", None), ("all_gather", torch.zeros(2, 2, dtype=torch.int64))]
    assert _two_ranks({0: calls, 1: calls}) == {0: 3, 1: 3}


@pytest.mark.parametrize(("other", "shown"), [(("barrier", None), "rank 1: barrier at"),
                                               (("all_reduce", torch.ones(4)), "rank 1: all_reduce float32 (4,)"),
                                               (("all_reduce", torch.ones(3).double()), "rank 1: all_reduce float64")])
def test_another_collective_shape_or_dtype_raises_on_both_ranks(other: tuple[str, Any], shown: str) -> None:
    results = _two_ranks({0: [("barrier", None), ("all_reduce", torch.ones(3))], 1: [("barrier", None), other]})
    for r in (0, 1):
        message = str(results[r])
        assert isinstance(results[r], CollectiveMismatchError), results
        assert f"collective #2 that xtrain issued differs between ranks ({ENV}=1" in message
        assert f"this is rank {r}" in message and "rank 0: all_reduce float32 (3,) at" in message and shown in message
        assert "test_collective_check.py:" in message  # the call site: innermost frame of code outside libraries


def test_the_setting_is_an_on_off_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert not collective_check_enabled()
    monkeypatch.setenv(ENV, "1")
    assert collective_check_enabled()
    monkeypatch.setenv(ENV, "sometimes")
    with pytest.raises(ConfigError, match=f"{ENV}='sometimes'"):
        collective_check_enabled()


def test_off_no_checker_runs() -> None:
    signal = ProgressSignal()
    with signal.collective("all_reduce", torch.ones(1)):
        assert signal.depth == 1 and signal.collective_name == "all_reduce"
    assert signal.checker is None and signal.collectives == 1
