"""The table printed at the end of CI: every nox session, then every cell of the accelerator x strategy x precision matrix.

    python tools/ci_summary.py build/ci [--require-all-cells] [--wall SECONDS]

Reads what ``tools/ci.py`` leaves in ``build/ci/``: nox's ``--report`` JSON (result and duration of each session) and
the junit XML files the noxfile's ``_pytest`` helper writes to ``build/ci/junit/<session>/`` (test counts; for the
matrix, each cell's declared outcome and ``group`` are junit properties written by tests_integration/test_matrix.py).

A cell is *ran* (declared to run, trained for real, passed), *refused* (declared refused, the declared ConfigError
was raised), *skipped* (declared to run, not possible here: the reason is shown) or *failed*. With
``--require-all-cells`` (a full CI run) the exit code is 1 when a cell failed, when a declared cell was run by no
session, or when a cell that the matrix declares runnable on ``cpu`` was skipped, unless its group is listed in
:data:`CANNOT_RUN_HERE` with the reason. Any session that did not succeed makes the exit code 1 as well.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["CANNOT_RUN_HERE", "Cell", "Counts", "Session", "main", "problems", "read_cells", "read_sessions",
           "render"]

# CPU groups the matrix declares runnable that no CI machine can run, each with why. Anything else declared
# runnable on cpu must run in CI, or CI fails.
CANNOT_RUN_HERE: dict[str, str] = {
    "cpu-bagua": "Bagua has no installable build here: its wheels (bagua-cuda116/117) need CUDA and NCCL and stop at "
                 "Python 3.10 (CI runs Python 3.11 on CPU)",
}
# Why whole accelerators have skipped cells on the CI machine (printed beside their rows).
ACCELERATOR_NOTES: dict[str, str] = {
    "cuda": "no NVIDIA GPU on the CI machine (refusals are checked with simulated devices)",
    "mps": "no Apple GPU on the CI machine (refusals are checked with simulated devices)",
    "xpu": "no Intel GPU on the CI machine (refusals are checked with simulated devices)",
    "xla": "CI does not install torch-xla: its pinned torch 2.9.1 is a 4.2 GB CUDA download (7 GB venv); "
           "run `nox -s xla` or `nox -s 'matrix(xla-xla)'` for XLA on CPU",
}
Outcome = Literal["ran", "refused", "skipped", "failed"]


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0

    def add(self, other: Counts) -> None:
        self.passed += other.passed
        self.failed += other.failed
        self.skipped += other.skipped


@dataclass(frozen=True)
class Cell:
    id: str
    group: str
    declared: str
    outcome: Outcome
    reason: str
    session: str

    @property
    def accelerator(self) -> str:
        return self.group.split("-", 1)[0]


@dataclass
class Session:
    name: str
    result: str
    seconds: float | None
    counts: Counts | None = None
    cells: list[Cell] = field(default_factory=list)


def _parse_junit(path: Path, session: str) -> tuple[Counts, list[Cell], set[str]]:
    """Counts of one junit file, the matrix cells it selected, and the ids of every cell it saw (selected or not)."""
    counts, cells, seen = Counts(), [], set()
    for case in ET.parse(path).getroot().iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped")
        reason = "" if skipped is None else skipped.get("message", "")
        props = {p.get("name"): p.get("value", "") for p in case.iter("property")}
        name = case.get("name", "")
        is_cell = "declared" in props and name.startswith("test_cell[")
        if is_cell:
            seen.add(name[len("test_cell["):-1])
            if reason.startswith("not selected"):  # another session's cell: not counted here
                continue
        if failed:
            counts.failed += 1
        elif skipped is not None:
            counts.skipped += 1
        else:
            counts.passed += 1
        if not is_cell:
            continue
        cell_id = name[len("test_cell["):-1]
        outcome: Outcome = ("failed" if failed else "skipped" if skipped is not None
                            else "ran" if props["declared"] == "runs" else "refused")
        cells.append(Cell(cell_id, props["group"], props["declared"], outcome, reason, session))
    return counts, cells, seen


def read_sessions(folder: Path) -> tuple[list[Session], set[str]]:
    """The sessions of nox's report in run order, with their junit counts and matrix cells; and every cell id seen."""
    report = json.loads((folder / "nox-report.json").read_text())
    sessions, seen = [], set()
    for entry in report["sessions"]:
        name = (entry.get("signatures") or [entry["name"]])[0]  # nox's friendly name: matrix_env(core), ...
        session = Session(name, entry["result"], entry.get("duration"))
        for junit in sorted((folder / "junit" / name).glob("*.xml")):
            counts, cells, ids = _parse_junit(junit, name)
            if session.counts is None:
                session.counts = Counts()
            session.counts.add(counts)
            session.cells += cells
            seen |= ids
        sessions.append(session)
    return sessions, seen


def read_cells(sessions: list[Session]) -> dict[str, list[Cell]]:
    """Every selected cell, by id (a list: a cell run by two sessions shows up twice)."""
    found: dict[str, list[Cell]] = {}
    for session in sessions:
        for cell in session.cells:
            found.setdefault(cell.id, []).append(cell)
    return found


def problems(sessions: list[Session], seen: set[str], *, require_all_cells: bool) -> list[str]:
    """Why this CI run fails (empty: it passes)."""
    found = [f"session {s.name}: {s.result}" for s in sessions if s.result != "success"]
    cells = read_cells(sessions)
    for cell_id, results in sorted(cells.items()):
        for cell in results:
            if cell.outcome == "failed":
                found.append(f"cell {cell_id} failed in {cell.session}")
            elif (require_all_cells and cell.outcome == "skipped" and cell.accelerator == "cpu"
                  and cell.declared == "runs" and cell.group not in CANNOT_RUN_HERE):
                found.append(f"cell {cell_id} is declared to run on cpu but was skipped in {cell.session}: "
                             f"{cell.reason}")
    if require_all_cells:
        if not seen:
            found.append("no matrix results at all (no junit XML with test_matrix.py cells under build/ci/junit/)")
        found += [f"cell {cell_id} was run by no session" for cell_id in sorted(seen - set(cells))]
    return found


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}:{rest:02d}"


def _cell_row(label: str, cells: list[Cell], note: str) -> str:
    counts = Counter(c.outcome for c in cells)
    return (f"{label:48} {counts['ran']:>4} {counts['refused']:>8} {counts['skipped']:>8} {counts['failed']:>7}  "
            f"{note}")


def render(sessions: list[Session], *, wall: float | None = None) -> str:
    """The summary table: sessions, then matrix cells (cpu by group, other accelerators one row each)."""
    lines = ["", "=" * 30 + " CI summary " + "=" * 30,
             f"{'session':48} {'result':>8} {'passed':>7} {'failed':>7} {'skipped':>8} {'wall':>7}"]
    for s in sessions:
        c = s.counts
        numbers = (f"{c.passed:>7} {c.failed:>7} {c.skipped:>8}" if c else f"{'-':>7} {'-':>7} {'-':>8}")
        lines.append(f"{s.name:48} {s.result:>8} {numbers} {_duration(s.seconds):>7}")
    total = sum(s.seconds or 0 for s in sessions)
    lines.append(f"{'sum of sessions':48} {'':>8} {'':>7} {'':>7} {'':>8} {_duration(total):>7}")
    if wall is not None:
        lines.append(f"{'wall time of the whole nox run':48} {'':>33} {_duration(wall):>7}")
    cells = [c for results in read_cells(sessions).values() for c in results]
    if cells:
        lines += ["", f"{'matrix cells (' + str(len(cells)) + ')':48} {'ran':>4} {'refused':>8} {'skipped':>8} "
                  f"{'failed':>7}  session / reason of the skips"]
        by_group: dict[str, list[Cell]] = {}
        for cell in sorted(cells, key=lambda c: c.id):
            by_group.setdefault(cell.group if cell.accelerator == "cpu" else cell.accelerator, []).append(cell)
        for label, group in sorted(by_group.items(), key=lambda kv: (not kv[0].startswith("cpu"), kv[0])):
            reasons = sorted({c.reason for c in group if c.outcome == "skipped"})
            where = ", ".join(sorted({c.session for c in group}))
            note = (CANNOT_RUN_HERE.get(label) or ACCELERATOR_NOTES.get(label) or "; ".join(r[:100] for r in reasons)
                    if reasons else where)
            lines.append(_cell_row(label, group, note))
        lines.append(_cell_row("all cells", cells, ""))
    return "\n".join(lines)


def _write_cells(sessions: list[Session], path: Path) -> None:
    rows = sorted((c for s in sessions for c in s.cells), key=lambda c: c.id)
    path.write_text("".join(f"{c.id}\t{c.outcome}\t{c.session}\t{c.reason}\n" for c in rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("folder", type=Path, help="the folder tools/ci.py writes (build/ci)")
    parser.add_argument("--require-all-cells", action="store_true",
                        help="a full CI run: every declared cell must be run by a session; cpu cells may not skip")
    parser.add_argument("--wall", type=float, help="the whole run's wall time in seconds, to print")
    args = parser.parse_args(argv)
    if not (args.folder / "nox-report.json").exists():
        print(f"ci_summary: no {args.folder / 'nox-report.json'}: nox did not get to write its report",
              file=sys.stderr)
        return 1
    sessions, seen = read_sessions(args.folder)
    print(render(sessions, wall=args.wall))
    _write_cells(sessions, args.folder / "cells.tsv")
    found = problems(sessions, seen, require_all_cells=args.require_all_cells)
    if not args.require_all_cells:
        print("\n(partial run: sessions were selected, so matrix coverage is not checked)")
    print(f"\nevery cell's outcome: {args.folder / 'cells.tsv'}")
    if found:
        print("\nCI FAILED:\n  " + "\n  ".join(found))
        return 1
    print("\nCI passed.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
