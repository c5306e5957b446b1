"""The GPU check: every test that needs CUDA, in every package, and the step-overhead benchmark on the GPU.

Made for a machine with one NVIDIA GPU (an H200), Python 3.12, torch with CUDA, pytest and pytest-timeout, no
network and nothing of ours installed. It runs in two steps on two machines:

``python tools/gpu_check.py prepare`` (here, where the sources and pip's build tools are)
    Builds every package under ``packages/`` as a pure-Python wheel into ``.whl/`` (gitignored), beside a
    ``manifest.json`` naming the commit they were built from.

``python3 tools/gpu_check.py run`` (there, from the repository root, with ``.whl/`` carried along)
    1. installs the wheels: ``python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl``, and
       puts ``/tmp/site`` first on ``PYTHONPATH`` (the entry points are found from the dist-info directories there);
    2. checks that ``xtrain.*`` is imported from there, not from the source tree, and that CUDA is usable;
    3. runs ``pytest -m gpu`` over every package's ``tests/`` and ``tests_integration/`` (single device, ddp with the
       GPUs there, fsdp, every precision incl. 16-mixed and bf16; cells whose package is not built skip, naming it);
    4. runs ``tools/bench/step_overhead.py --accelerator cuda``;
    5. writes ``summary.md``, ``summary.json``, ``junit.xml``, ``pytest.log``, ``bench.log`` and ``env.txt`` to
       ``$OUT`` (``./gpu-check-out`` when unset) and prints the summary.
    Every step has a hard time limit; together they stay under 8 minutes (``--budget``).

``run --dry-run`` does the same on a machine without a GPU: the gpu tests are collected and skip, and the benchmark
runs briefly on the CPU. It proves the pipeline before a GPU session spends its minutes on it.

The device call (see /work/.library/device/README.md)::

    run(command="python3 tools/gpu_check.py run", carry=[".whl"], timeout_s=540)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / ".whl"
SITE = Path("/tmp/site")


@dataclass
class Step:
    name: str
    command: list[str]
    returncode: int | None = None
    seconds: float = 0.0
    timed_out: bool = False
    log: str = ""


@dataclass
class Report:
    dry_run: bool
    steps: list[Step] = field(default_factory=list)
    tests: dict[str, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    bench: str = ""
    environment: str = ""


def _run(name: str, command: list[str], *, timeout: float, env: dict[str, str], log: Path | None = None) -> Step:
    """Run ``command`` in its own session with a hard limit; the whole session is killed when the limit passes."""
    step = Step(name, command)
    start = time.monotonic()
    with open(log or os.devnull, "w") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            step.returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            step.timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    step.seconds = round(time.monotonic() - start, 1)
    step.log = log.read_text(errors="replace") if log is not None else ""
    print(f"[gpu_check] {name}: exit {step.returncode}{' (timed out)' if step.timed_out else ''} "
          f"in {step.seconds} s", flush=True)
    return step


def prepare() -> int:
    """Build every package's wheel into .whl/ (pure Python, so one wheel serves any Python 3 and platform)."""
    if WHEELS.exists():
        shutil.rmtree(WHEELS)
    WHEELS.mkdir()
    packages = sorted(p.parent for p in (ROOT / "packages").glob("*/pyproject.toml"))
    isolation = ["--no-build-isolation"] if _has("hatchling") else []
    for package in packages:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "--wheel-dir",
                        str(WHEELS), str(package)], check=True, cwd=ROOT)
    wheels = sorted(WHEELS.glob("*.whl"))
    impure = [w.name for w in wheels if not w.name.endswith("-py3-none-any.whl")]
    if impure:
        print(f"not pure-Python wheels: {impure}")
        return 1
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout)
    manifest = {"commit": commit, "uncommitted_changes": dirty, "wheels": [w.name for w in wheels]}
    (WHEELS / "manifest.json").write_text(json.dumps(manifest, indent=2))
    size = sum(w.stat().st_size for w in wheels) / 1024
    print(f"built {len(wheels)} wheels ({size:.0f} KiB) into {WHEELS}: {', '.join(w.name for w in wheels)}")
    return 0


def _has(module: str) -> bool:
    from importlib.util import find_spec

    return find_spec(module) is not None


def _environment(env: dict[str, str]) -> str:
    lines = [f"python {sys.version.split()[0]} at {sys.executable}"]
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60)
        lines.append(f"nvidia-smi: {smi.stdout.strip() or smi.stderr.strip()}")
    code = ("import json, torch, xtrain.core, xtrain.accelerators\n"
            "from xtrain.core.registry import ACCELERATORS, STRATEGIES, PRECISIONS\n"
            "print(json.dumps({'torch': torch.__version__, 'cuda_available': torch.cuda.is_available(),\n"
            "  'gpus': torch.cuda.device_count(),\n"
            "  'gpu_name': torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,\n"
            "  'xtrain_core_from': xtrain.core.__file__, 'accelerators': ACCELERATORS.names(),\n"
            "  'strategies': STRATEGIES.names(), 'precisions': PRECISIONS.names()}))\n")
    probe = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120)
    lines.append(probe.stdout.strip() or probe.stderr.strip())
    return "\n".join(lines)


def _junit(path: Path, report: Report) -> None:
    if not path.exists():
        return
    suite = ET.parse(path).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite  # type: ignore[assignment]
    assert suite is not None
    report.tests = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    for case in suite.iter("testcase"):
        ident = f"{case.get('classname')}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            report.failed.append(ident)
        skipped = case.find("skipped")
        if skipped is not None:
            reason = (skipped.get("message") or "").strip()
            report.skipped[reason] = report.skipped.get(reason, 0) + 1


def run(*, dry_run: bool, budget: float) -> int:
    deadline = time.monotonic() + budget
    out = Path(os.environ.get("OUT") or ROOT / "gpu-check-out")
    out.mkdir(parents=True, exist_ok=True)
    report = Report(dry_run=dry_run)
    wheels = sorted(str(w) for w in WHEELS.glob("*.whl"))
    if not wheels:
        print(f"no wheels in {WHEELS}: run 'python tools/gpu_check.py prepare' first (and carry .whl)")
        return 2
    if SITE.exists():
        shutil.rmtree(SITE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SITE), os.environ.get("PYTHONPATH", "")]).rstrip(":"),
           "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    report.steps.append(_run("install", [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                                         "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(SITE), *wheels],
                             timeout=120, env=env, log=out / "install.log"))
    report.environment = _environment(env)
    (out / "env.txt").write_text(report.environment + "\n")
    print(report.environment, flush=True)
    if f"{SITE}/xtrain/core" not in report.environment:
        print("xtrain.core was not imported from the installed wheels; stopping")
        return _finish(out, report, 1)
    tests = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "packages").glob("*/tests"))]
    if (ROOT / "tests_integration").is_dir():
        tests.append("tests_integration")
    remaining = deadline - time.monotonic()
    pytest_limit = max(60.0, remaining - (60.0 if dry_run else 150.0))
    report.steps.append(_run("pytest -m gpu", [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider",
                                               "-q", "-rs", "--timeout=300", "--continue-on-collection-errors",
                                               f"--junitxml={out / 'junit.xml'}",
                                               *tests], timeout=pytest_limit, env=env, log=out / "pytest.log"))
    _junit(out / "junit.xml", report)
    bench_args = (["--accelerator", "cpu", "--steps", "200", "--rounds", "1", "--arms", "plain,lean,defaults"]
                  if dry_run else ["--accelerator", "cuda", "--steps", "2000", "--rounds", "3",
                                   "--arms", "plain,lean,defaults,fabric"])
    bench_limit = max(30.0, deadline - time.monotonic() - 5)
    step = _run("step-overhead benchmark", [sys.executable, "tools/bench/step_overhead.py", *bench_args],
                timeout=bench_limit, env=env, log=out / "bench.log")
    report.steps.append(step)
    report.bench = "\n".join(line for line in step.log.splitlines() if not line.startswith("Epoch "))
    pytest_ok = report.steps[1].returncode == 0 and not report.failed
    ok = all(s.returncode == 0 for s in report.steps) and pytest_ok
    if not dry_run and report.tests.get("tests", 0) - report.tests.get("skipped", 0) == 0:
        print("no gpu test ran: is CUDA usable here?")
        ok = False
    return _finish(out, report, 0 if ok else 1)


def _finish(out: Path, report: Report, code: int) -> int:
    lines = [f"# GPU check{' (dry run, no GPU)' if report.dry_run else ''}: {'PASSED' if code == 0 else 'FAILED'}",
             "", "## Environment", "```", report.environment, "```", "", "## Steps"]
    lines += [f"- {s.name}: exit {s.returncode}{' (timed out)' if s.timed_out else ''}, {s.seconds} s"
              for s in report.steps]
    lines += ["", "## Tests (pytest -m gpu)", f"{report.tests}"]
    lines += [f"- FAILED {name}" for name in report.failed]
    lines += [f"- skipped x{count}: {reason}" for reason, count in sorted(report.skipped.items())]
    lines += ["", "## Step-overhead benchmark", "```", report.bench.strip(), "```"]
    summary = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(summary)
    data = asdict(report)
    for step in data["steps"]:
        step["log"] = step["log"][-4000:]
    (out / "summary.json").write_text(json.dumps(data, indent=2))
    print(summary, flush=True)
    return code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", required=True)
    sub.add_parser("prepare", help="build the wheels into .whl/ (here)")
    run_parser = sub.add_parser("run", help="install the wheels, run the gpu tests and the benchmark (there)")
    run_parser.add_argument("--dry-run", action="store_true", help="no GPU here: the gpu tests skip, CPU benchmark")
    run_parser.add_argument("--budget", type=float, default=470.0, help="seconds for the whole run (default 470)")
    args = parser.parse_args()
    if args.step == "prepare":
        return prepare()
    return run(dry_run=args.dry_run, budget=args.budget)


if __name__ == "__main__":
    raise SystemExit(main())
