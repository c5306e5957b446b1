"""Render docs/compatibility.md from the matrix (tests_integration/matrix.py) and its last run.

    python -m pytest tests_integration/test_matrix.py   # writes build/matrix-report.json
    python tools/gen_compatibility.py                    # writes docs/compatibility.md
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests_integration"))

from matrix import cells  # noqa: E402

SYMBOL = {"runs": "✅", "refused": "⛔", "not here": "◻️"}


def main() -> int:
    report_path = ROOT / "build" / "matrix-report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {"cells": {}}
    results = report["cells"]
    table: dict[str, dict[str, dict[str, str]]] = defaultdict(lambda: defaultdict(dict))
    precisions: list[str] = []
    notes: dict[str, str] = {}
    for cell in cells():
        if cell.precision not in precisions:
            precisions.append(cell.precision)
        result = results.get(cell.id)
        if result is None:
            mark, detail = "?", "not run in the last matrix run"
        else:
            mark, detail = SYMBOL[result["outcome"]], result["detail"]
        table[cell.accelerator][cell.strategy][cell.precision] = mark
        if result is not None and result["outcome"] == "refused":
            notes.setdefault(f"{cell.accelerator} / {cell.strategy}", detail)
        elif result is not None and result["outcome"] == "not here":
            notes.setdefault(f"{cell.accelerator}", detail)
    lines = [
        "# Compatibility",
        "",
        "Which accelerator, strategy and precision combinations run, generated from the declared matrix "
        "(`tests_integration/matrix.py`) and its last run by `tools/gen_compatibility.py`.",
        "",
        "✅ runs, and was trained, saved and resumed exactly in the last run · ◻️ runs where the hardware is present "
        "(not on the machine of the last run) · ⛔ refused before anything starts, with the error shown below · "
        "? not run",
        "",
    ]
    for accelerator, rows in table.items():
        used = sorted({r["with"] for c in cells() if c.accelerator == accelerator
                       and (r := results.get(c.id)) is not None and "with" in r})
        lines += [f"## {accelerator}", ""]
        lines += [f"Last run with {environment}." for environment in used] + ([""] if used else [])
        lines += ["| strategy | " + " | ".join(precisions) + " |", "|---|" + "---|" * len(precisions)]
        for strategy, marks in sorted(rows.items()):
            lines.append(f"| `{strategy}` | " + " | ".join(marks.get(p, "") for p in precisions) + " |")
        lines.append("")
    lines += ["## Why cells are refused or were not run", "", "| accelerator (/ strategy) | reason |", "|---|---|"]
    lines += [f"| {key} | {detail.replace('|', '/')} |" for key, detail in sorted(notes.items())]
    (ROOT / "docs" / "compatibility.md").write_text("\n".join(lines) + "\n")
    print(f"wrote docs/compatibility.md from {len(results)} cell results")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
