"""Before/after wall-clock figures of ``step_overhead.py`` for two revisions, on the same machine, in one sitting.

A ratio to the plain loop depends on the machine as much as on the code: on this project's 2-core VM the lean
Trainer measures 1.07-1.10x where another machine measured 0.99x for the same commit. Figures from different days
or machines therefore cannot show what a change did. This tool runs the *current* ``step_overhead.py`` against the
packages of ``--before`` (a git revision, checked out into a temporary worktree and put first on ``PYTHONPATH``) and
of the working tree, alternating the two in fresh processes, so both sides share the machine's state and the same
benchmark code. The older revision must accept the Trainer arguments the benchmark passes.

Reported per arm and side, for both of ``step_overhead.py``'s measures: the median over processes of each process's
median ratio, and the smallest ratio seen. ``epoch`` (each run's median epoch) is the steadiest; ``run`` (whole runs)
is the one to read when a change moves work between epochs, e.g. a checkpoint saved every few epochs rather than in
each (the median epoch then has no save in it).

``--tool pairs`` runs ``step_pairs.py`` instead (each Trainer epoch against plain epochs run just before and after it
in the same process: steadier where the machine's speed drifts within seconds); its ``sum`` measure (summed epochs,
every epoch end included) takes the place of ``run``.

Run:  python tools/bench/compare_revisions.py --before <rev> [--tool overhead|pairs] [--pairs 2] [--rounds 3]
      [--steps 3000] [--arms plain,lean,defaults,log1,log20,clip]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent.parent


def _sources(tree: Path) -> str:
    """``PYTHONPATH`` that makes ``tree``'s packages win over the installed (editable) ones."""
    return os.pathsep.join(str(src) for src in sorted((tree / "packages").glob("*/src")))


def _check_imports(env: dict[str, str], tree: Path) -> None:
    where = subprocess.run([sys.executable, "-c", "import xtrain.core; print(xtrain.core.__file__)"],
                           capture_output=True, text=True, check=True, env=env).stdout.strip()
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"xtrain.core came from {where}, not from {tree}: an install hook shadows PYTHONPATH.")


# Per tool: its script, the first words of its table's header, a row's width, and where in a row the (run or sum
# min, median, epoch min, median) ratios are.
_TOOLS = {"overhead": ("step_overhead.py", ["arm", "us/step"], 8, (3, 4, 5, 6)),
          "pairs": ("step_pairs.py", ["arm", "sum"], 6, (2, 1, 4, 3))}


def _run(env: dict[str, str], args: argparse.Namespace) -> dict[str, tuple[float, float, float, float]]:
    """One benchmark process; per arm its (run min, run median, epoch min, epoch median) ratios."""
    script, header_start, width, at = _TOOLS[args.tool]
    extra = ["--no-import"] if args.tool == "overhead" else []  # step_pairs.py runs the Trainer arms it is given
    out = subprocess.run([sys.executable, str(_HERE / script), "--arms", args.arms, "--rounds", str(args.rounds),
                          "--steps", str(args.steps), *extra], capture_output=True, text=True, env=env, check=False)
    rows: dict[str, tuple[float, float, float, float]] = {}
    header = False
    for line in out.stdout.splitlines():
        fields = line.split()
        if fields[:2] == header_start:
            header = True
        elif header and len(fields) == width:
            rows[fields[0]] = (float(fields[at[0]]), float(fields[at[1]]), float(fields[at[2]]), float(fields[at[3]]))
    if not rows:
        raise SystemExit(f"{script} printed no table (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="git revision to compare the working tree with")
    parser.add_argument("--tool", default="overhead", choices=sorted(_TOOLS))
    parser.add_argument("--arms", default="plain,lean,defaults,log1,log20,clip")
    parser.add_argument("--pairs", type=int, default=2, help="processes per side, alternated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(_ROOT), "worktree", "add", "--detach", str(before), args.before],
                       check=True, capture_output=True)
        try:
            sides = {"before": before, "after": _ROOT}
            envs = {name: os.environ | {"PYTHONPATH": _sources(tree)} for name, tree in sides.items()}
            for name, tree in sides.items():
                _check_imports(envs[name], tree)
            results: dict[str, list[dict[str, tuple[float, float, float, float]]]] = {name: [] for name in sides}
            for _ in range(args.pairs):
                for name in sides:
                    results[name].append(_run(envs[name], args))
        finally:
            subprocess.run(["git", "-C", str(_ROOT), "worktree", "remove", "--force", str(before)], check=False)
    print(f"ratios to the plain loop ({_TOOLS[args.tool][0]}); {args.pairs} processes per side, alternated; "
          f"before = {args.before}, after = working tree")
    for measure, at in (("epoch", 2), ("run" if args.tool == "overhead" else "sum", 0)):
        print(f"{measure + ':':10} {'before median':>14} {'min':>6} {'after median':>13} {'min':>6}")
        for arm in args.arms.split(","):
            if arm in ("plain", "plain_clip") or any(arm not in run for side in results.values() for run in side):
                continue
            cells = []
            for name in sides:
                runs = results[name]
                cells += [statistics.median(run[arm][at + 1] for run in runs), min(run[arm][at] for run in runs)]
            print(f"{arm:10} {cells[0]:14.3f} {cells[1]:6.3f} {cells[2]:13.3f} {cells[3]:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
