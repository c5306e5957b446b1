"""Per-step cost of xtrain's precision plugins over the same precision written by hand in a plain PyTorch loop.

For each precision the plain arm is what a user would write without a framework: ``torch.autocast`` (plus a
``torch.amp.GradScaler`` for ``16-mixed``) or a converted model and inputs. The Trainer arm is
``Trainer(precision=...)`` with logging, checkpointing and the progress bar off, on the task of
``step_overhead.py`` (a 32-64-10 MLP, batch 64, SGD, CPU, one thread). Both arms start from the same seed and data,
and the script checks that their final losses are bitwise equal, so the plugin does exactly the hand-written math.
Arms run interleaved for several rounds; medians are reported. ``32-true`` is the reference: its ratio is the
Trainer's own overhead, so a plugin adds cost only where its ratio is higher.

Run:  python tools/bench/precision_overhead.py [--steps 1000] [--rounds 3] [--precisions bf16-mixed,16-mixed,...]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from step_overhead import task_data, task_net
from torch.utils.data import DataLoader

AUTOCAST = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}
TRUE = {"bf16-true": torch.bfloat16, "16-true": torch.float16, "64-true": torch.float64}


def plain(precision: str, steps: int) -> tuple[float, float]:
    torch.manual_seed(0)
    net = task_net()
    dtype = TRUE.get(precision)
    if dtype is not None:
        net = net.to(dtype)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu") if precision == "16-mixed" else None
    loader = DataLoader(task_data(), batch_size=64, shuffle=True)
    done, loss = 0, torch.tensor(0.0)
    start = time.perf_counter()
    while done < steps:
        for x, y in loader:
            if dtype is not None:
                x = x.to(dtype)
            context: AbstractContextManager[Any] = (torch.autocast("cpu", dtype=AUTOCAST[precision])
                                                    if precision in AUTOCAST else nullcontext())
            with context:
                loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            done += 1
            if done >= steps:
                break
    return time.perf_counter() - start, float(loss.detach())


def trainer(precision: str, steps: int) -> tuple[float, float]:
    from xtrain.core import Trainer, TrainModule

    class Tiny(TrainModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = task_net()
            self.last = torch.tensor(0.0)

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.last = loss
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    torch.manual_seed(0)
    module = Tiny()
    loader = DataLoader(task_data(), batch_size=64, shuffle=True)
    t = Trainer(max_steps=steps, accelerator="cpu", devices=1, precision=precision, enable_checkpointing=False,
                logger=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    start = time.perf_counter()
    t.fit(module, loader)
    return time.perf_counter() - start, float(module.last.detach())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precisions", default="32-true,bf16-mixed,16-mixed,bf16-true,64-true")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the CPU-emulation hint is expected here
    torch.set_num_threads(1)
    precisions = args.precisions.split(",")
    arms = [(p, kind) for p in precisions for kind in ("plain", "trainer")]
    times: dict[tuple[str, str], list[float]] = {a: [] for a in arms}
    losses: dict[tuple[str, str], float] = {}
    for p, kind in arms:  # warm-up, not counted
        (plain if kind == "plain" else trainer)(p, min(args.steps, 200))
    for _ in range(args.rounds):
        for p, kind in arms:
            elapsed, losses[(p, kind)] = (plain if kind == "plain" else trainer)(p, args.steps)
            times[(p, kind)].append(elapsed)
    print(f"precision overhead: {args.steps} steps, median of {args.rounds} rounds, torch {torch.__version__}, "
          f"1 thread")
    print(f"{'precision':12} {'plain us/step':>14} {'trainer us/step':>16} {'ratio':>7}  final losses equal")
    mismatched = []
    for p in precisions:
        base, ours = statistics.median(times[(p, "plain")]), statistics.median(times[(p, "trainer")])
        equal = losses[(p, "plain")] == losses[(p, "trainer")]
        if not equal:
            mismatched.append(p)
        print(f"{p:12} {base / args.steps * 1e6:14.1f} {ours / args.steps * 1e6:16.1f} {ours / base:7.3f}  {equal}")
    if mismatched:
        print(f"FINAL LOSSES DIFFER from the hand-written loop: {mismatched}")
    return 1 if mismatched else 0


if __name__ == "__main__":
    raise SystemExit(main())
