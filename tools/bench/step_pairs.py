"""The Trainer's per-step overhead measured epoch by epoch against a plain loop run in between: steadier than
``step_overhead.py`` on a machine whose speed drifts.

On this project's 2-core VM the same plain 3000-step run takes 1.6 s or 2.1 s from one run to the next (the process's
CPU time moves with it: the processor is slower, nothing else ran), so ratios of whole runs taken seconds apart move
by 5-10 points between identical runs, and ``step_overhead.py``'s figures for one arm disagree from one day to the
next by more than the targets' margins. Here the plain loop runs one epoch (100 steps, about 50 ms) at each start of
a Trainer epoch, inside the same process (a callback; its own model, optimizer, loader and random numbers, so the
Trainer's run is unchanged): every Trainer epoch lies between two plain epochs milliseconds away, and each ratio is
the Trainer epoch over the mean of its two neighbours. The first epoch (warm-up) is left out.

Reported per arm, over ``--rounds`` runs: ``sum``, the median over runs of (the Trainer's epochs summed) / (their
neighbours summed), which counts every epoch's end (a checkpoint saved every few epochs included); and the median
and minimum of all epochs' ratios, each (as in ``step_overhead.py``'s epoch column) the typical epoch. Arms are those
of ``step_overhead.py`` that run a Trainer; ``clip`` and ``clip_lean`` pair with a plain loop that clips. What the
two loops share (the process, the allocator, the caches they evict from each other) is the same for every arm.

Run:  python tools/bench/step_pairs.py [--steps 3000] [--rounds 5] [--arms lean,defaults,log1,log20,clip,clip_lean]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from step_overhead import STEPS_PER_EPOCH, TRAINER_ARMS, over_lean, run_loop, task_data, task_net, trainer
from torch.utils.data import DataLoader

from xtrain.core import Callback


class PlainEpochs(Callback):
    """Runs one epoch of the plain loop at each Trainer epoch's start and times both."""

    def __init__(self, clip: float | None) -> None:
        with torch.random.fork_rng():  # the Trainer's run draws the same random numbers as without this callback
            torch.manual_seed(0)
            self.net = task_net()
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05)
        self.loader = DataLoader(task_data(), batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(0))
        self.clip = clip
        self.plain: list[float] = []
        self.trainer: list[float] = []
        self._started: float | None = None

    def _plain_epoch(self) -> float:
        return run_loop(self.net, self.opt, self.loader, STEPS_PER_EPOCH, lambda loss: loss.backward(),
                        clip=self.clip).elapsed

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        now = time.perf_counter()
        if self._started is not None:
            self.trainer.append(now - self._started)
        self.plain.append(self._plain_epoch())
        self._started = time.perf_counter()

    def ratios(self) -> list[float]:
        """Each complete Trainer epoch after the first over the mean of the plain epochs before and after it."""
        return [t / ((self.plain[i] + self.plain[i + 1]) / 2) for i, t in enumerate(self.trainer) if i > 0]

    def sum_ratio(self) -> float:
        pairs = range(1, len(self.trainer))
        return sum(self.trainer[i] for i in pairs) / sum((self.plain[i] + self.plain[i + 1]) / 2 for i in pairs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--arms", default=",".join(TRAINER_ARMS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    wanted = [a for a in args.arms.split(",") if a in TRAINER_ARMS]
    for arm in wanted:  # warm-up
        trainer(STEPS_PER_EPOCH * 3, callbacks=(PlainEpochs(TRAINER_ARMS[arm].get("clip")),), **TRAINER_ARMS[arm])
    sums: dict[str, list[float]] = {a: [] for a in wanted}
    epochs: dict[str, list[float]] = {a: [] for a in wanted}
    for _ in range(args.rounds):
        for arm in wanted:
            pairs = PlainEpochs(TRAINER_ARMS[arm].get("clip"))
            trainer(args.steps, callbacks=(pairs,), **TRAINER_ARMS[arm])
            sums[arm].append(pairs.sum_ratio())
            epochs[arm] += pairs.ratios()
    print(f"step pairs: {args.steps} steps, {args.rounds} rounds, torch {torch.__version__}, 1 thread; each Trainer "
          f"epoch / the mean of the plain epochs run just before and after it (plain_clip for clip arms)")
    print(f"{'arm':10} {'sum median':>11} {'min':>6} {'epoch median':>13} {'min':>6} {'epochs':>7}")
    for arm in wanted:
        print(f"{arm:10} {statistics.median(sums[arm]):11.3f} {min(sums[arm]):6.3f} "
              f"{statistics.median(epochs[arm]):13.3f} {min(epochs[arm]):6.3f} {len(epochs[arm]):7}")
    line = over_lean({arm: statistics.median(sums[arm]) for arm in wanted})
    if line:
        print(line + " (sum)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
