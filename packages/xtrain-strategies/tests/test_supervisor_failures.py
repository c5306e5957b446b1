"""The restart supervisor on failures an outside trial (trial C) found misreported, with plain-Python ranks (fast).

A hang that recurs on every attempt must be recognised as the same failure although gloo's message names a new
port each time, the summary must name the rank the hang report called stuck, and the run id printed must be the
one the ranks use.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from xtrain.core.restarts import FailureRecord
from xtrain.core.testing import python_command, run_processes
from xtrain.strategies._internal.supervisor import Failure, normalized_error

SCRIPT = str(Path(__file__).parent / "scripts" / "supervised_failures.py")
GLOO = "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:{}"

pytestmark = pytest.mark.timeout(120)


def supervise(tmp_path: Path, mode: str, max_restarts: int, *run_name: str) -> tuple[int | None, str]:
    result = run_processes([python_command(SCRIPT, mode, str(max_restarts), str(tmp_path), *run_name)], timeout=60,
                           cwd=tmp_path, envs=[{"XTRAIN_RUN_ID": "", "TORCHELASTIC_RUN_ID": "", "SLURM_JOB_ID": ""}])
    return result.returncodes[0], result.output


def test_the_same_gloo_error_on_a_new_port_is_the_same_failure(tmp_path: Path) -> None:
    code, out = supervise(tmp_path, "gloo", 3)
    assert code == 1, out
    assert "the same failure as the previous attempt" in out and "stopping after 1 restart(s) instead of 3" in out
    assert not list(tmp_path.glob("rank*-attempt2"))


def test_a_recurring_hang_names_the_stuck_rank_and_stops_early(tmp_path: Path) -> None:
    code, out = supervise(tmp_path, "hang", 3)
    assert code == 1, out
    assert "rank 1 exited with code 1 (Hang: no progress" in out, out
    assert "rank 0 exited" not in out, out
    assert "stopping after 1 restart(s) instead of 3" in out


def test_the_run_id_printed_is_the_run_name_the_ranks_use(tmp_path: Path) -> None:
    code, out = supervise(tmp_path, "ok", 1, "named")
    assert code == 0, out
    assert "run id 'named'" in out and "restart-group-" not in out, out
    assert {p.read_text() for p in tmp_path.glob("rank*-attempt*")} == {"named"}


@pytest.mark.parametrize(("a", "b", "same"), [
    (GLOO.format(9140), GLOO.format(28077), True),
    ("OSError: [Errno 98] address in use by pid 41234", "OSError: [Errno 98] address in use by pid 50311", True),
    ("RuntimeError: <object at 0x7f3a2c> failed", "RuntimeError: <object at 0x7f9b11> failed", True),
    ("TimeoutError: waited 3.52 s", "TimeoutError: waited 4.10 s", True),
    ("ValueError: attempt 1", "ValueError: attempt 2", False),  # small numbers carry meaning
    ("ValueError: shape (2, 3)", "ValueError: shape (2, 4)", False),
    ("[::1]:2345 refused", "[::1]:2399 refused", True),
])
def test_what_changes_between_attempts_of_one_failure_is_ignored(a: str, b: str, same: bool) -> None:
    assert (normalized_error(a) == normalized_error(b)) is same
    first = Failure(0, 1, None, FailureRecord(0, 21, 20, a))
    second = Failure(0, 1, None, FailureRecord(0, 21, 20, b))
    assert (first.signature() == second.signature()) is same
