"""The restart supervisor of xtrain's launcher, with real processes but plain-Python ranks (fast).

The restarts of real training runs (bitwise equality, torchrun, elastic) are in
tests_integration/test_self_healing.py (``nox -s self_healing``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from xtrain.core.restarts import FailureRecord
from xtrain.core.testing import python_command, run_processes
from xtrain.strategies._internal.supervisor import Failure

SCRIPT = str(Path(__file__).parent / "scripts" / "supervised.py")


def supervise(tmp_path: Path, mode: str, max_restarts: int) -> tuple[int | None, str]:
    result = run_processes([python_command(SCRIPT, mode, str(max_restarts), str(tmp_path))], timeout=60,
                           cwd=tmp_path, envs=[{"XTRAIN_RUN_ID": "", "TORCHELASTIC_RUN_ID": "", "SLURM_JOB_ID": ""}])
    return result.returncodes[0], result.output


def test_a_failed_group_is_restarted_with_the_same_run_id(tmp_path: Path) -> None:
    code, out = supervise(tmp_path, "once", 2)
    assert code == 0, out
    assert "rank 1 exited with code 3 (ValueError: attempt 0) at step 7; ended the other ranks; restart 1 of 2" in out
    ids = {p.read_text() for p in tmp_path.glob("rank*-attempt*")}
    assert sorted(p.name for p in tmp_path.glob("rank*")) == ["rank0-attempt0", "rank0-attempt1", "rank1-attempt0",
                                                             "rank1-attempt1"]
    assert len(ids) == 1 and next(iter(ids)).startswith("restart-group-"), "one run id for every attempt"


def test_the_same_failure_twice_stops_early_as_deterministic(tmp_path: Path) -> None:
    code, out = supervise(tmp_path, "same", 5)
    assert code == 3, out
    assert "it is deterministic" in out and "stopping after 1 restart(s) instead of 5" in out
    assert not list(tmp_path.glob("rank*-attempt2"))


def test_after_max_restarts_the_last_failures_code_is_the_exit_code(tmp_path: Path) -> None:
    code, out = supervise(tmp_path, "different", 2)
    assert code == 3, out
    assert "restart 2 of 2" in out and "no restarts left (max_restarts=2): giving up with exit code 3" in out
    assert "deterministic" not in out


@pytest.mark.parametrize(("a", "b", "same"), [
    (Failure(1, 1, None, FailureRecord(1, 7, 5, "E: x")), Failure(1, 1, None, FailureRecord(1, 7, 5, "E: x")), True),
    (Failure(1, 1, None, FailureRecord(1, 7, 5, "E: x")), Failure(1, 1, None, FailureRecord(1, 8, 5, "E: x")), False),
    (Failure(1, 137, "SIGKILL", FailureRecord(1, None, 5, "")), Failure(0, 137, "SIGKILL", FailureRecord(0, None, 5, "")),
     True),
    (Failure(1, 137, "SIGKILL", FailureRecord(1, None, 5, "")), Failure(1, 137, "SIGKILL", FailureRecord(1, None, 10, "")),
     False),
    (Failure(1, 137, "SIGKILL", None), Failure(1, 137, "SIGKILL", None), False),  # nothing known: never "the same"
])
def test_failure_signatures(a: Failure, b: Failure, same: bool) -> None:
    assert (a.signature() is not None and a.signature() == b.signature()) is same
