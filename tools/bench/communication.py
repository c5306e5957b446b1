"""What Bagua's algorithms on plain torch.distributed save: bytes sent per rank per step, against plain ``ddp``.

The task: an MLP 512-1024-1024-10 (1.59 M parameters, 6.34 MB of float32 gradients), batch 64 per rank, SGD,
2 CPU ranks on gloo, one thread per rank, the same data and initial weights in every run. Each strategy is started
the way users start it (``Trainer(strategy=..., devices=2)`` in a script xtrain re-executes for rank 1).

Measured on every rank, from the first training batch to the end of training:

* **wire**: bytes this process wrote to sockets and files (``wchar`` of ``/proc/self/io``), i.e. everything gloo
  sent, plus the fail-fast watchdog's small heartbeats. Independent of the strategies' own accounting.
* **payload**: bytes the strategy handed to collectives (``strategy.communication``), where it counts them.
* steps/s and the final training loss (mean of the last 10 steps), to show what the savings cost.

Run:  python tools/bench/communication.py [--steps 60] [--strategies ddp,local_sgd,...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

STRATEGIES = ["ddp", "ddp_fp16_compress", "ddp_bf16_compress", "ddp_int8_compress", "local_sgd", "decentralized",
              "async_model_averaging"]
BATCH = 64


def _wchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar"))


def worker(strategy: str, steps: int, out: Path) -> None:
    from xtrain.core import Callback, Trainer, TrainModule, seed_everything

    class MLP(TrainModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                           torch.nn.ReLU(), torch.nn.Linear(1024, 10))
            self.losses: list[float] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.losses.append(float(loss.detach()))
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    class Meter(Callback):
        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            if trainer.global_step == 0 and batch_idx == 0:
                self.start, self.bytes = time.perf_counter(), _wchar()

        def on_train_end(self, trainer: Any, module: Any) -> None:
            wire, seconds = _wchar() - self.bytes, time.perf_counter() - self.start
            s = trainer.strategy
            sent = getattr(s, "communication", None)
            record = {"rank": s.global_rank, "wire": wire, "seconds": seconds, "steps": trainer.global_step,
                      "payload": sent.bytes if sent is not None else None,
                      "rounds": getattr(s, "rounds", None), "loss": sum(module.losses[-10:]) / 10}
            (out / f"rank{s.global_rank}.json").write_text(json.dumps(record))

    seed_everything(0)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(BATCH * 2 * 32, 512, generator=g)
    y = (x[:, :10] * 3).argmax(dim=1)  # learnable
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True)
    trainer = Trainer(accelerator="cpu", devices=2, strategy=strategy, max_steps=steps, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                      num_sanity_val_steps=0, callbacks=[Meter()])
    trainer.fit(MLP(), loader)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps, Path(args.out))
        return
    rows = []
    for name in args.strategies.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            command = [sys.executable, os.path.abspath(__file__), "--worker", name, "--out", tmp,
                       "--steps", str(args.steps)]
            subprocess.run(command, check=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
            ranks = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in (0, 1)]
        steps = ranks[0]["steps"]
        row = {"strategy": name, "wire_per_step": sum(r["wire"] for r in ranks) / 2 / steps,
               "payload_per_step": ranks[0]["payload"] / steps if ranks[0]["payload"] is not None else None,
               "steps_per_s": steps / max(r["seconds"] for r in ranks), "loss": ranks[0]["loss"],
               "rounds": ranks[0]["rounds"]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    base = next((r["wire_per_step"] for r in rows if r["strategy"] == "ddp"), None)
    print(f"\n{args.steps} steps, 2 gloo ranks, MLP 512-1024-1024-10 (1.59 M params = 6.34 MB float32)\n")
    print("| strategy | wire KB/step/rank | vs ddp | payload KB/step | steps/s | loss (last 10) | rounds |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = "1x" if not base or r["strategy"] == "ddp" else f"{base / r['wire_per_step']:.2f}x less"
        payload = f"{r['payload_per_step'] / 1e3:.0f}" if r["payload_per_step"] is not None else "n/a"
        print(f"| {r['strategy']} | {r['wire_per_step'] / 1e3:.0f} | {ratio} | {payload} | {r['steps_per_s']:.1f} "
              f"| {r['loss']:.3f} | {r['rounds'] if r['rounds'] is not None else ''} |")


if __name__ == "__main__":
    main()
