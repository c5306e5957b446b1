"""Per-step overhead of the Trainer (and the Engine) over a plain PyTorch loop, as ratios from one run.

The task: a 32-64-10 MLP, batch 64, an in-memory TensorDataset through a DataLoader (shuffled), SGD, 3000 steps on
the CPU with one thread. Every arm starts from the same seed and data; the script checks that their final losses
are equal, then prints microseconds per step and the ratio to the plain loop. Arms run interleaved, several rounds,
and the median is reported, so background load affects all arms alike.

Also measures the import time of ``xtrain.core`` (with ``Trainer`` and ``TrainModule``) against ``torch`` alone, in
fresh interpreters.

``--accelerator cuda`` runs every arm on the GPU (the plain loop moves each batch with ``.to("cuda")``, as the
Trainer does); ``tools/gpu_check.py`` runs it that way.

Run:  python tools/bench/step_overhead.py [--steps 3000] [--rounds 5] [--accelerator cpu|cuda]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

STEPS_PER_EPOCH = 100


def task_data() -> TensorDataset:
    """The task every arm trains (shared with precision_overhead.py): 6400 seeded samples of 32 features, 10 classes."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(64 * STEPS_PER_EPOCH, 32, generator=g)
    y = torch.randint(0, 10, (64 * STEPS_PER_EPOCH,), generator=g)
    return TensorDataset(x, y)


def task_net() -> torch.nn.Module:
    """The 32-64-10 MLP every arm trains."""
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


ACCELERATOR = "cpu"


def _loop(net: Any, opt: torch.optim.Optimizer, loader: Any, steps: int,
          backward: Callable[[torch.Tensor], None], device: torch.device | None = None) -> tuple[float, float]:
    """The hand-written loop every non-Trainer arm runs; only ``backward``, the setup and (for the plain arm) moving
    batches to ``device`` differ. The final loss is read before the clock stops, so queued GPU work is counted."""
    move = device is not None and device.type != "cpu"
    done = 0
    loss = torch.tensor(0.0)
    start = time.perf_counter()
    while done < steps:
        for x, y in loader:
            if move:
                x, y = x.to(device), y.to(device)
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            backward(loss)
            opt.step()
            done += 1
            if done >= steps:
                break
    final = float(loss.detach())
    return time.perf_counter() - start, final


def plain(steps: int) -> tuple[float, float]:
    torch.manual_seed(0)
    device = torch.device(ACCELERATOR)
    net = task_net().to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    loader = DataLoader(task_data(), batch_size=64, shuffle=True)
    return _loop(net, opt, loader, steps, lambda loss: loss.backward(), device)


def trainer(steps: int, *, lean: bool) -> tuple[float, float]:
    from xtrain.core import Trainer, TrainModule

    class Tiny(TrainModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = task_net()
            self.last = torch.tensor(0.0)

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.log("loss", loss, prog_bar=True)
            self.last = loss
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    torch.manual_seed(0)
    module = Tiny()
    loader = DataLoader(task_data(), batch_size=64, shuffle=True)
    with tempfile.TemporaryDirectory() as root:
        extra = {"enable_checkpointing": False, "logger": False, "enable_progress_bar": False,
                 "enable_model_summary": False}
        t = Trainer(max_steps=steps, default_root_dir=root, accelerator=ACCELERATOR, devices=1,
                    **(extra if lean else {"enable_model_summary": False}))
        start = time.perf_counter()
        t.fit(module, loader)
        final = float(module.last.detach())
        elapsed = time.perf_counter() - start
    return elapsed, final


def engine(steps: int) -> tuple[float, float]:
    from xtrain.core import Engine

    torch.manual_seed(0)
    eng = Engine(accelerator=ACCELERATOR, devices=1)
    net = task_net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    net, opt = eng.setup(net, opt)
    loader = eng.setup_dataloaders(DataLoader(task_data(), batch_size=64, shuffle=True))
    return _loop(net, opt, loader, steps, eng.backward)


def fabric(steps: int) -> tuple[float, float]:
    from lightning.fabric import Fabric  # type: ignore[import-not-found]

    torch.manual_seed(0)
    fab = Fabric(accelerator=ACCELERATOR, devices=1)
    net = task_net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    net, opt = fab.setup(net, opt)
    loader = fab.setup_dataloaders(DataLoader(task_data(), batch_size=64, shuffle=True))
    return _loop(net, opt, loader, steps, fab.backward)


def import_time(statement: str, rounds: int) -> float:
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    times = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
             for _ in range(rounds)]
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--arms", default="plain,lean,defaults,engine,fabric")
    parser.add_argument("--accelerator", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    global ACCELERATOR
    ACCELERATOR = args.accelerator
    torch.set_num_threads(1)
    arms: dict[str, Callable[[int], tuple[float, float]]] = {
        "plain": plain, "lean": lambda s: trainer(s, lean=True), "defaults": lambda s: trainer(s, lean=False),
        "engine": engine, "fabric": fabric,
    }
    wanted = [a for a in args.arms.split(",") if a in arms]
    try:
        import lightning.fabric  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        wanted = [a for a in wanted if a != "fabric"]
    times: dict[str, list[float]] = {a: [] for a in wanted}
    losses: dict[str, float] = {}
    for arm in wanted:  # warm-up round, not counted
        arms[arm](min(args.steps, 300))
    for _ in range(args.rounds):
        for arm in wanted:
            elapsed, loss = arms[arm](args.steps)
            times[arm].append(elapsed)
            losses[arm] = loss
    base = statistics.median(times["plain"])
    print(f"step overhead: {args.steps} steps, median of {args.rounds} rounds, torch {torch.__version__}, 1 thread, "
          f"on {ACCELERATOR}")
    print(f"{'arm':10} {'us/step':>9} {'ratio':>7} {'final loss':>12}")
    for arm in wanted:
        med = statistics.median(times[arm])
        print(f"{arm:10} {med / args.steps * 1e6:9.1f} {med / base:7.3f} {losses[arm]:12.6f}")
    mismatched = [a for a in wanted if a != "fabric" and losses[a] != losses["plain"]]
    if mismatched:
        print(f"FINAL LOSSES DIFFER from the plain loop: {mismatched}")
    t_torch = import_time("import torch", 5)
    t_core = import_time("import torch; import xtrain.core; from xtrain.core import Trainer, TrainModule", 5)
    print(f"import: torch {t_torch:.3f} s, torch + xtrain.core (Trainer, TrainModule) {t_core:.3f} s, "
          f"difference {t_core - t_torch:+.3f} s")
    return 1 if mismatched else 0


if __name__ == "__main__":
    raise SystemExit(main())
