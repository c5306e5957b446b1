"""Model parallelism on 4 CPU processes, and compiled training against a plain compiled PyTorch loop.

Part 1 (4 processes, gloo): the docs' tiny transformer made wider (dim 256, 4 blocks, vocab 1024, 64 tokens),
SGD with momentum, 16 samples per step in every arm, trained on the Trainer with
``ddp``, ``fsdp``, ``model_parallel`` with tensor_parallel=2 x replicate 2 ("tp2") and tensor_parallel=2 x
shard 2 ("2x2"). Reported per arm (rank 0): steps/s over the steps after the first two, the bytes of parameters and
optimizer state this rank holds (a DTensor's local shard), and peak RSS growth of the process during fit.

Part 2 (one process): the same model compiled (inductor) in a plain PyTorch loop and on the lean Trainer
(``torch.compile(module)`` passed to ``fit``), interleaved repetitions; the ratio is xtrain / plain steps/s
(target >= 0.98). Eager is shown for reference.

Run:  python tools/bench/model_parallel.py [--steps 20] [--reps 3]     (check ``uptime``: the machine should be quiet)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "examples" / "model_parallel"))
from fsdp import _local_bytes  # this folder is on sys.path when a bench runs
from tiny_transformer import TinyTransformer, token_data

SIZE: dict[str, Any] = {"vocab": 1024, "dim": 256, "heads": 8, "depth": 4, "classes": 16}
SAMPLES_PER_STEP, LENGTH = 16, 64
ARMS = {"ddp": ("ddp", None), "fsdp": ("fsdp", None),
        "tp2": ("model_parallel", {"tensor_parallel": 2, "data_parallel_replicate": 2, "data_parallel_shard": 1}),
        "2x2": ("model_parallel", {"tensor_parallel": 2, "data_parallel_shard": 2})}


def _data(steps: int) -> Any:
    return token_data(samples=SAMPLES_PER_STEP * steps, length=LENGTH, vocab=SIZE["vocab"], classes=SIZE["classes"])


class Model(TinyTransformer):
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


def worker(arm: str, steps: int, out: str) -> None:
    from xtrain.core import Callback, Trainer
    from xtrain.strategies import ModelParallelStrategy

    name, mesh = ARMS[arm]
    strategy: Any = ModelParallelStrategy(**mesh) if mesh else name
    data_parallel = 4 // (mesh or {}).get("tensor_parallel", 1)
    times: list[float] = []

    class Clock(Callback):
        def on_train_batch_end(self, *args: Any) -> None:
            times.append(time.perf_counter())

    torch.manual_seed(0)
    torch.set_num_threads(1)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    trainer = Trainer(accelerator="cpu", devices=4, strategy=strategy, max_steps=steps, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[Clock()])
    model = Model(build_in_configure_model=bool(mesh), **SIZE)
    trainer.fit(model, DataLoader(_data(steps), batch_size=SAMPLES_PER_STEP // data_parallel))
    if trainer.global_rank == 0:
        held = _local_bytes(model.parameters()) + _local_bytes(
            v for opt in trainer.optimizers for state in opt.state.values() for v in state.values())
        Path(out).write_text(json.dumps({
            "steps_per_s": (len(times) - 3) / (times[-1] - times[2]), "held_mb": held / 2**20,
            "peak_rss_growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024}))


def run_arm(arm: str, steps: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        subprocess.run([sys.executable, __file__, "--worker", arm, "--steps", str(steps), "--out", str(out)],
                       check=True, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1200)
        return json.loads(out.read_text())  # type: ignore[no-any-return]


def compiled_rates(steps: int) -> dict[str, float]:
    """steps/s of a plain compiled loop, the Trainer on torch.compile(module), and plain eager (after warm-up)."""
    from xtrain.core import Callback, Trainer

    loader = DataLoader(_data(steps), batch_size=SAMPLES_PER_STEP)

    def plain(compile_it: bool) -> float:
        torch.manual_seed(0)
        model = Model(**SIZE)
        forward = torch.compile(model) if compile_it else model
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        stamps = []
        for tokens, labels in loader:
            loss = torch.nn.functional.cross_entropy(forward(tokens), labels)
            loss.backward()
            opt.step()
            opt.zero_grad()
            stamps.append(time.perf_counter())
        return (len(stamps) - 3) / (stamps[-1] - stamps[2])

    def trained() -> float:
        stamps: list[float] = []

        class Clock(Callback):
            def on_train_batch_end(self, *args: Any) -> None:
                stamps.append(time.perf_counter())

        torch.manual_seed(0)
        trainer = Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False, callbacks=[Clock()])
        trainer.fit(torch.compile(Model(**SIZE)), loader)
        return (len(stamps) - 3) / (stamps[-1] - stamps[2])

    return {"plain_compiled": plain(True), "xtrain_compiled": trained(), "plain_eager": plain(False)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--worker")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps, args.out)
        return
    print(f"load average: {os.getloadavg()}")
    print(f"{'arm':6} {'steps/s':>8} {'held MB':>8} {'peak RSS +MB':>13}")
    for arm in ARMS:
        r = run_arm(arm, args.steps)
        print(f"{arm:6} {r['steps_per_s']:8.2f} {r['held_mb']:8.2f} {r['peak_rss_growth_mb']:13.1f}")
    torch.set_num_threads(max(1, (os.cpu_count() or 1)))
    rows = [compiled_rates(args.steps) for _ in range(args.reps)]
    ratios = [r["xtrain_compiled"] / r["plain_compiled"] for r in rows]
    print(f"compiled, one process: plain {statistics.median(r['plain_compiled'] for r in rows):.2f} steps/s, xtrain "
          f"{statistics.median(r['xtrain_compiled'] for r in rows):.2f}, eager "
          f"{statistics.median(r['plain_eager'] for r in rows):.2f}; xtrain/plain compiled min {min(ratios):.3f} "
          f"median {statistics.median(ratios):.3f} (target >= 0.98)")


if __name__ == "__main__":
    main()
