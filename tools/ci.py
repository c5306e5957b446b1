"""CI in one command, the one .ci/run and the README run: nox's default set, then the summary table.

    python3 tools/ci.py                 # every default session; fails if any fails or a cpu matrix cell skipped
    python3 tools/ci.py -s horovod      # nox arguments pass through (same code path; coverage is not checked)

Every session runs even after one fails (nox's default); the table (tools/ci_summary.py) is printed at the end and
the exit code is non-zero when nox failed or the summary found a problem. Set ``XTRAIN_CACHE`` to choose where the
Horovod wheel is cached (default ``~/.cache/xtrain``) and ``PIP_CACHE_DIR`` for pip's cache.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import ci_summary  # noqa: E402


def main(argv: list[str]) -> int:
    out = ROOT / "build" / "ci"
    shutil.rmtree(out, ignore_errors=True)  # junit files of an earlier run must not count in this one
    out.mkdir(parents=True)
    started = time.monotonic()
    nox = subprocess.run([sys.executable, "-m", "nox", "--report", str(out / "nox-report.json"), *argv], cwd=ROOT,
                         check=False)
    summary = ci_summary.main([str(out), "--wall", str(time.monotonic() - started),
                               *([] if argv else ["--require-all-cells"])])
    print(f"ci: nox exit code {nox.returncode}, summary exit code {summary}")
    return nox.returncode or summary


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
