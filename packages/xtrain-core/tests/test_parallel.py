"""ParallelStrategy's collectives and exit, in two real processes, and the helpers strategies build on."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import NoReturn

import numpy as np
import pytest
import torch

from xtrain.core import TrainModule
from xtrain.core._internal.rng import collect_rng_states, restore_rng_states
from xtrain.core._internal.watchdog import Watchdog
from xtrain.core.defaults import SingleDeviceStrategy
from xtrain.core.parallel import _peer_failure
from xtrain.core.testing import free_port, leftover_processes, run_processes

SCRIPT = Path(__file__).parent / "scripts" / "collectives.py"


def test_all_gather_of_scalars_and_rng_states_across_two_processes(tmp_path: Path) -> None:
    port = str(free_port())
    envs = [{"LOCAL_RANK": str(r), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port} for r in range(2)]
    result = run_processes([[sys.executable, str(SCRIPT), str(tmp_path)]] * 2, timeout=120, envs=envs)
    result.check()  # exit code 0: the process group is destroyed at exit instead of aborting in destructors
    assert not leftover_processes(result)
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r in records:
        assert r["scalar"] == [0.0, 1.0]
        assert r["matrix"] == [[[0, 0, 0], [0, 0, 0]], [[1, 1, 1], [1, 1, 1]]]
        assert r["numpy_keys_equal"] and r["other_keys_differ"] and r["processes_per_node"] == 2


def test_rng_state_survives_a_plain_pickle_and_restores_numpy() -> None:
    import pickle

    np.random.seed(7)
    states = pickle.loads(pickle.dumps(collect_rng_states()))
    expected = np.random.rand(3)
    np.random.seed(99)
    restore_rng_states(states)
    assert np.array_equal(np.random.rand(3), expected)


def test_python_rng_state_is_one_bytes_value_and_the_list_form_still_restores() -> None:
    import random
    import struct

    random.seed(5)
    states = collect_rng_states()
    version, words, gauss = states["python"]
    assert isinstance(words, bytes) and len(words) == 625 * 4  # one object for torch.save, not 625 ints
    expected = [random.random() for _ in range(3)]
    for form in (words, list(struct.unpack("<625I", words))):  # the list: checkpoints of xtrain-core 1.0
        random.seed(99)
        restore_rng_states({**states, "python": [version, form, gauss]})
        assert [random.random() for _ in range(3)] == expected
    for bad in ([version, words[:-1], gauss], [version, "x", gauss], [version, words, [1]]):
        with pytest.raises((TypeError, ValueError, struct.error)):
            restore_rng_states({**states, "python": bad})


def test_peer_failures_are_recognised() -> None:
    gone = RuntimeError("[pair.cc:553] Connection closed by peer [127.0.0.1]:35027. remote worker crashing")
    try:
        raise ValueError("wrapped") from gone
    except ValueError as err:
        assert _peer_failure(err)
    assert not _peer_failure(RuntimeError("boom from rank 1"))


def test_a_failure_caused_by_a_peer_waits_for_the_peer_to_be_named() -> None:
    """With no watcher thread running there is nobody to name the peer: the report is written at once."""
    store = torch.distributed.HashStore()
    dog = Watchdog(store, rank=0, world_size=2, dead_after=0.2)
    dog.report_failure("details", caused_by_peer=True)
    assert store.get("abort").decode().startswith("0\ndetails")


def test_the_watchdog_puts_faulthandler_back_as_it_found_it() -> None:
    """A rank that goes on after fit (a script under torchrun) is left as it was: faulthandler is on only while
    the watchdog watches, unless it was on before."""
    import faulthandler

    was = faulthandler.is_enabled()
    try:
        for enabled_before in (False, True):
            (faulthandler.enable if enabled_before else faulthandler.disable)()
            dog = Watchdog(torch.distributed.HashStore(), rank=0, world_size=1, interval=0.05, dead_after=5.0)
            dog.start()
            assert faulthandler.is_enabled()
            dog.stop()
            assert faulthandler.is_enabled() is enabled_before
    finally:
        (faulthandler.enable if was else faulthandler.disable)()


class _RecordingWatchdog(Watchdog):
    """A test double for the process exit alone: records when the watchdog would end this rank."""

    exited = False

    def _exit(self) -> NoReturn:  # type: ignore[misc]
        self.exited = True
        self._stop.set()  # the watcher thread returns instead of ending the process


@pytest.mark.parametrize("caused_by_peer", [False, True])
def test_a_rank_ending_its_own_failure_is_not_cut_short_by_a_peers_report(caused_by_peer: bool) -> None:
    """Every rank failed (Ctrl-C on each, or one bug everywhere) and rank 1 reported first: rank 0, busy with its own
    on_exception and teardown, is not ended by its watchdog before it stops the watchdog itself. A rank whose error
    was a lost peer is still ended at once with that peer's report."""
    store = torch.distributed.HashStore()
    store.set("abort", "1\nrank 1's traceback")
    dog = _RecordingWatchdog(store, rank=0, world_size=2, interval=0.05, dead_after=60.0)
    dog.start()
    dog.report_failure("rank 0's traceback", caused_by_peer=caused_by_peer)
    time.sleep(0.5)  # ten polls of the store
    assert dog.exited is caused_by_peer
    dog.stop()
    assert dog.exited is caused_by_peer


def test_single_process_strategies_run_one_process_per_node_and_training_step_end_is_identity() -> None:
    assert SingleDeviceStrategy().processes_per_node == 1
    out = {"loss": torch.tensor([1.0, 2.0])}
    assert TrainModule().training_step_end(out) is out
