"""2-process DDP on the CPU: xtrain ``strategy="ddp"`` against a plain ``torchrun`` DDP script, in one run.

The task: an MLP 1024-2048-2048-10, batch 128 per rank, 200 steps, SGD, one thread per rank, gloo. Both arms train
the same initial weights on the same data in the same order, and the script checks that their final losses agree.

Reported, as medians over interleaved rounds (so background load hits both arms alike):

* steady-state steps/s (steps 20..200, timed on rank 0) and its ratio xtrain / plain (target >= 0.98);
* time to first step: from starting the command (``python script.py`` / ``torchrun``) to the end of the first
  optimizer step on rank 0, and its ratio xtrain / plain (target <= 1.15).

Run:  python tools/bench/ddp.py [--rounds 3] [--steps 200]      (check ``uptime`` first: the machine should be quiet)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

BATCH, WARMUP = 128, 20


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048),
                               torch.nn.ReLU(), torch.nn.Linear(2048, 10))


def _data(steps: int) -> TensorDataset:
    g = torch.Generator().manual_seed(1234)
    n = BATCH * 2 * min(steps, 50)  # the data repeats after 50 steps: same cost, a fraction of the memory
    return TensorDataset(torch.randn(n, 1024, generator=g), torch.randint(0, 10, (n,), generator=g))


def _write(out: str, ends: list[float], loss: float) -> None:
    Path(out).write_text(json.dumps({"ends": ends, "loss": loss}))


def plain(steps: int, out: str) -> None:
    """What a user writes by hand for torchrun."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DistributedSampler

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(_net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = _data(steps)
    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler)
    ends: list[float] = []
    loss = torch.tensor(0.0)
    epoch = 0
    while len(ends) < steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            ends.append(time.time())
            if len(ends) >= steps:
                break
        epoch += 1
    if dist.get_rank() == 0:
        _write(out, ends, float(loss.detach()))
    dist.destroy_process_group()


def xtrain(steps: int, out: str) -> None:
    """The same training with xtrain: ``python script.py`` and ``Trainer(strategy="ddp", devices=2)``."""
    from xtrain.core import Callback, Trainer, TrainModule

    torch.set_num_threads(1)

    class MLP(TrainModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _net()
            self.last = torch.tensor(0.0)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.last = loss
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Clock(Callback):
        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any,
                               batch_idx: int) -> None:
            self.ends.append(time.time())

    clock = Clock()
    trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=steps, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      num_sanity_val_steps=0, callbacks=[clock])
    torch.manual_seed(0)
    module = MLP()
    trainer.fit(module, DataLoader(_data(steps), batch_size=BATCH, shuffle=False))
    if trainer.is_global_zero:
        _write(out, clock.ends, float(module.last.detach()))


def _run_arm(arm: str, steps: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "result.json")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        me = [str(Path(__file__).resolve()), "--worker", arm, "--steps", str(steps), "--out", out]
        if arm == "plain":
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--nnodes=1",
                   "--master-addr=127.0.0.1", f"--master-port={_free_port()}", *me]
        else:
            cmd = [sys.executable, *me]
        start = time.time()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        result = json.loads(Path(out).read_text())
    ends = result["ends"]
    steady = (len(ends) - WARMUP) / (ends[-1] - ends[WARMUP - 1])
    return {"steps_per_s": steady, "first_step_s": ends[0] - start, "loss": result["loss"]}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--worker", choices=["plain", "xtrain"])
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.worker:
        (plain if args.worker == "plain" else xtrain)(args.steps, args.out)
        return 0
    results: dict[str, list[dict[str, float]]] = {"plain": [], "xtrain": []}
    for _ in range(args.rounds):
        for arm in ("plain", "xtrain"):
            results[arm].append(_run_arm(arm, args.steps))
    med = {arm: {k: statistics.median(r[k] for r in rs) for k in ("steps_per_s", "first_step_s")}
           for arm, rs in results.items()}
    losses = {arm: rs[-1]["loss"] for arm, rs in results.items()}
    print(f"DDP 2 ranks on CPU, MLP 1024-2048-2048-10, batch {BATCH}/rank, {args.steps} steps, 1 thread/rank, "
          f"median of {args.rounds} rounds, torch {torch.__version__}, load {os.getloadavg()[0]:.2f}")
    print(f"{'arm':8} {'steps/s':>9} {'first step s':>13} {'final loss':>11}")
    for arm in ("plain", "xtrain"):
        print(f"{arm:8} {med[arm]['steps_per_s']:9.2f} {med[arm]['first_step_s']:13.2f} {losses[arm]:11.6f}")
    print(f"ratio xtrain/plain: steps/s {med['xtrain']['steps_per_s'] / med['plain']['steps_per_s']:.3f} "
          f"(target >= 0.98), time to first step {med['xtrain']['first_step_s'] / med['plain']['first_step_s']:.3f} "
          f"(target <= 1.15)")
    same = abs(losses["plain"] - losses["xtrain"]) <= 1e-5 * max(1.0, abs(losses["plain"]))
    if not same:
        print("FINAL LOSSES DIFFER between the arms")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
