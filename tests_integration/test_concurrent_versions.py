"""Runs started together on one logger root each get their own ``version_N`` (sweep workers, parallel trials)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from xtrain.core.testing import python_command, run_processes

SCRIPT = str(Path(__file__).parent / "scripts" / "concurrent_version.py")
RUNS = 4


def _open_gate_when_ready(gate: Path, runs: int) -> None:
    deadline = time.monotonic() + 100
    while len(list(gate.glob("ready-*"))) < runs and time.monotonic() < deadline:
        time.sleep(0.01)
    (gate / "go").touch()


def test_runs_started_together_get_their_own_versions_and_a_failed_one_removes_only_its_own(tmp_path: Path) -> None:
    root, gate = tmp_path / "logs", tmp_path / "gate"
    gate.mkdir()
    modes = ["fail"] + ["ok"] * (RUNS - 1)
    opener = threading.Thread(target=_open_gate_when_ready, args=(gate, RUNS), daemon=True)
    opener.start()
    result = run_processes([python_command(SCRIPT, str(root), str(gate), str(i), mode)
                            for i, mode in enumerate(modes)], timeout=150)
    opener.join(timeout=5)
    assert not result.timed_out and result.returncodes == [0] * RUNS, result.processes
    dirs = [re.search(r"log_dir=(.*)", p.stdout).group(1).strip() for p in result.processes]  # type: ignore[union-attr]
    assert len(set(dirs[1:])) == RUNS - 1, dirs  # one version each, though all counted the same directories
    assert "failed at step 0 on purpose" in result.processes[0].stdout
    # The failed run removed the version it claimed; a run that counted after that may have taken the number again.
    assert dirs[0] in dirs[1:] or not Path(dirs[0]).exists(), "the failed run's own version directory stays behind"
    for run_dir in dirs[1:]:
        rows = (Path(run_dir) / "metrics.csv").read_text().splitlines()
        steps = [line.split(",") for line in rows[1:]]
        assert len(steps) == 4, (run_dir, rows)  # its own four steps, nobody else's
