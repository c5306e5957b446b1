"""Per-step overhead as CPU instructions, counted by valgrind: the same arms as ``step_overhead.py``, nearly noiseless.

Wall-clock ratios on a shared or virtual machine move by several percent between identical runs, more than the
overheads being measured. Instructions executed are nearly deterministic (two runs of one arm differ by about 5
million of 10 billion, 0.2% of a step here over 1000 steps; bytecode is written before the runs and the hash seed is
fixed, because compiling in every run added 100 million of noise): each arm runs under ``valgrind --tool=cachegrind``
for ``--short`` and ``--long`` steps, and the difference divided by the extra steps is the instructions one step
costs (setup, imports and the first epoch cancel out; per-epoch work such as the checkpoint save is included,
amortized). The ratio to the plain loop is the overhead the step path itself adds in the training process.

What it cannot see: time in the kernel (file writes, fsync), waiting for other threads or the disk, and cache or
branch effects. Nor the rate instructions run at: the interpreter's are slower than torch's kernels', so a ratio here
understates the Trainer's Python-level overhead two- to threefold (lean 1.018 here, 1.06-1.07 by the wall clock
over 15 interleaved rounds; the Engine 0.984 and 1.025). Use it to see where instructions go and whether a change
removed some, not to claim a wall-clock target. Arms also differ by about 1% for reasons outside the step path (``lean``, which does strictly less
than ``defaults``, counted 1% more here, presumably allocator state);
``step_overhead.py`` measures the wall clock, with its noise. Two to three minutes per run; arms run in parallel.

Run:  python tools/bench/step_instructions.py [--arms plain,lean,...] [--short 100] [--long 1100] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from step_overhead import BASELINE_OF, arm_functions

_HERE = Path(__file__).resolve().parent
# Bytecode on (compiling every module in each run adds billions of instructions and their noise), one hash seed.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONHASHSEED": "0"}
# Runs one arm once, through step_overhead.py's own arm table, so both tools time exactly the same code.
_RUN_ONE = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("step_overhead", {path!r})
so = importlib.util.module_from_spec(spec); spec.loader.exec_module(so)
torch.set_num_threads(1)
so.arm_functions()[sys.argv[1]](int(sys.argv[2]))
"""


def instructions(arm: str, steps: int) -> int:
    """Instructions the whole process executed training ``arm`` for ``steps`` steps."""
    code = _RUN_ONE.format(path=str(_HERE / "step_overhead.py"))
    result = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                             sys.executable, "-c", code, arm, str(steps)], capture_output=True, text=True, check=True,
                            env=_ENV)
    found = re.search(r"I\s+refs:\s+([\d,]+)", result.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{result.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    known = [a for a in arm_functions() if a != "fabric"]  # Lightning's loop is not what this tool is about
    parser.add_argument("--arms", default=",".join(known))
    parser.add_argument("--short", type=int, default=100)
    parser.add_argument("--long", type=int, default=1100)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    wanted = [a for a in args.arms.split(",") if a in known]
    for arm in list(wanted):
        base = BASELINE_OF.get(arm, "plain")
        if base not in wanted:
            wanted.insert(0, base)
    # Write the bytecode once, outside valgrind, so that no measured run compiles.
    subprocess.run([sys.executable, "-c", _RUN_ONE.format(path=str(_HERE / "step_overhead.py")), "log1", "1"],
                   check=True, env=_ENV, capture_output=True)
    runs = [(arm, steps) for arm in wanted for steps in (args.short, args.long)]
    with ThreadPoolExecutor(args.jobs) as pool:
        counts = dict(zip(runs, pool.map(lambda run: instructions(*run), runs), strict=True))
    per_step = {arm: (counts[arm, args.long] - counts[arm, args.short]) / (args.long - args.short) for arm in wanted}
    print(f"instructions per step (valgrind, ({args.long} - {args.short} steps) / {args.long - args.short}), "
          f"ratio to the plain loop")
    print(f"{'arm':10} {'instr/step':>12} {'vs':>10} {'ratio':>7}")
    for arm in wanted:
        base = BASELINE_OF.get(arm, "plain")
        print(f"{arm:10} {per_step[arm]:12,.0f} {base:>10} {per_step[arm] / per_step[base]:7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
