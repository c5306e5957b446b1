"""tools/ci_summary.py: the table CI prints, and when it fails CI (a failed session, a failed cell, a cpu cell that
the matrix declares runnable but that was skipped, a cell no session ran)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from xtrain.core.testing import python_command, run_processes

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import ci_summary  # noqa: E402


def _report(folder: Path, **results: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    sessions = [{"name": name.split("(")[0], "signatures": [name], "result": result, "duration": 61.0, "args": {}}
                for name, result in results.items()]
    (folder / "nox-report.json").write_text(json.dumps({"result": 1, "sessions": sessions}))


def _junit(folder: Path, session: str, cases: list[tuple[str, str, str, str]]) -> None:
    """cases: (cell id, group, declared, "" passed / "skip:<reason>" / "fail")."""
    out = []
    for cell, group, declared, result in cases:
        body = (f'<skipped type="pytest.skip" message="{result[5:]}"/>' if result.startswith("skip:")
                else '<failure message="boom"/>' if result == "fail" else "")
        out.append(f'<testcase classname="test_matrix" name="test_cell[{cell}]"><properties>'
                   f'<property name="group" value="{group}"/><property name="declared" value="{declared}"/>'
                   f"</properties>{body}</testcase>")
    target = folder / "junit" / session
    target.mkdir(parents=True, exist_ok=True)
    (target / "0.xml").write_text(f'<testsuites><testsuite name="pytest">{"".join(out)}</testsuite></testsuites>')


def test_a_real_matrix_run_is_tabled_and_every_unrun_cell_fails_a_full_run(tmp_path: Path) -> None:
    folder = tmp_path / "ci"
    session = "matrix_env(accelerators)"
    junit = folder / "junit" / session / "0.xml"
    junit.parent.mkdir(parents=True)
    # refusals only (cpu-xla), a declared cannot-run-here group (cpu-bagua), a missing accelerator (cuda-ddp)
    result = run_processes([python_command("-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                                           "-o", "junit_family=xunit1", str(ROOT / "tests_integration" / "test_matrix.py"))],
                           envs=[{"XTRAIN_MATRIX_GROUPS": "cpu-xla,cpu-bagua,cuda-ddp"}], timeout=300, cwd=ROOT)
    assert result.returncodes == [0], result.output
    _report(folder, **{"lint": "success", session: "success"})

    sessions, seen = ci_summary.read_sessions(folder)
    cells = ci_summary.read_cells(sessions)
    assert {c.group for r in cells.values() for c in r} == {"cpu-xla", "cpu-bagua", "cuda-ddp"}
    assert {c.outcome for c in cells["cpu-xla-32-true"]} == {"refused"}
    assert cells["cpu-bagua-32-true"][0].outcome == "skipped" and "needs Bagua" in cells["cpu-bagua-32-true"][0].reason
    assert sessions[1].counts is not None and sessions[1].counts.passed == 6  # "not selected" cells are not counted
    assert sessions[1].counts.skipped == 12
    table = ci_summary.render(sessions)
    assert "cpu-bagua" in table and ci_summary.CANNOT_RUN_HERE["cpu-bagua"] in table
    assert "no NVIDIA GPU" in table
    assert ci_summary.problems(sessions, seen, require_all_cells=False) == []
    full = ci_summary.problems(sessions, seen, require_all_cells=True)
    assert "cell cpu-ddp-32-true was run by no session" in full
    assert not any(p.startswith(("cell cpu-bagua-", "cell cpu-xla-", "cell cuda-ddp-")) for p in full), full


def test_a_skipped_cpu_cell_a_failed_cell_and_a_failed_session_fail_ci(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "ci"
    _report(folder, **{"tests": "success", "horovod": "failed", "matrix_env(strategies)": "success"})
    _junit(folder, "matrix_env(strategies)", [
        ("cpu-ddp-32-true", "cpu-ddp", "runs", ""),
        ("cpu-ddp-bf16-true", "cpu-ddp", "runs", "skip:strategy='ddp' not installed"),
        ("cpu-fsdp-16-mixed", "cpu-fsdp", "refused", ""),
        ("cuda-ddp-32-true", "cuda-ddp", "runs", "skip:accelerator 'cuda' is not available on this machine"),
    ])
    _junit(folder, "horovod", [("cpu-horovod-32-true", "cpu-horovod", "runs", "fail")])

    assert ci_summary.main([str(folder), "--require-all-cells"]) == 1
    out = capsys.readouterr().out
    assert "CI FAILED" in out
    assert "session horovod: failed" in out
    assert "cell cpu-horovod-32-true failed in horovod" in out
    assert "cell cpu-ddp-bf16-true is declared to run on cpu but was skipped" in out
    assert "cuda-ddp-32-true" not in out.split("CI FAILED")[1]  # no GPU here: skipped with its reason, not a failure
    row = next(line for line in out.splitlines() if line.startswith("horovod "))
    assert row.split()[1:5] == ["failed", "0", "1", "0"] and row.split()[-1] == "1:01"
    assert (folder / "cells.tsv").read_text().count("\n") == 5


def test_a_clean_run_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "ci"
    _report(folder, **{"lint": "success", "matrix_env(core)": "success"})
    _junit(folder, "matrix_env(core)", [("cpu-single_device-32-true", "cpu-single_device", "runs", ""),
                                        ("cpu-single_device-16-mixed", "cpu-single_device", "refused", "")])
    assert ci_summary.main([str(folder), "--require-all-cells", "--wall", "125"]) == 0
    out = capsys.readouterr().out
    assert "CI passed." in out and "2:05" in out
    row = next(line for line in out.splitlines() if line.startswith("cpu-single_device"))
    assert row.split()[1:5] == ["1", "1", "0", "0"]


def test_no_report_fails(tmp_path: Path) -> None:
    assert ci_summary.main([str(tmp_path)]) == 1


def test_the_readme_runs_what_ci_runs() -> None:
    command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1].removesuffix(' "$@"')
    assert command == "python3 -m pip install -q nox && python3 tools/ci.py"
    assert f"```bash\n{command}\n```" in (ROOT / "README.md").read_text()
