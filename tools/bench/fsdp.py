"""FSDP against DDP at world size 2: memory per rank, and how long a checkpoint save blocks training.

The model: an MLP of 6 square Linear(4096) layers (~100.7M parameters, ~403 MB in float32), AdamW, batch 8 per rank,
one thread per rank, trained 3 steps on the Engine. Each arm runs in its own processes.

Reported per rank (rank 0; both ranks hold the same amounts):

* parameters + optimizer state in memory: the bytes of the tensors this rank keeps (a DTensor's local shard),
  counted after the optimizer has stepped (AdamW: two moments per parameter) - expected ~1/world_size under FSDP;
* peak memory: on CUDA ``torch.cuda.max_memory_allocated``; on CPU the process's peak RSS growth over the moment
  before the model was built (it includes the one full copy every rank builds before sharding);
* FSDP only: seconds ``engine.save`` blocks the loop for a sharded checkpoint written synchronously and with
  ``async_save=True`` (the background write's total time is shown too), median of 3 saves.

Run:  python tools/bench/fsdp.py [--accelerator cpu|cuda]      (check ``uptime`` first: the machine should be quiet)
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

WIDTH, LAYERS, BATCH, SAVES = 4096, 6, 8, 3


def _net() -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def _local_bytes(tensors: Any) -> int:
    total = 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            local = t.to_local() if hasattr(t, "to_local") else t
            total += local.numel() * local.element_size()
    return total


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def worker(arm: str, accelerator: str, out: str) -> None:
    from xtrain.core import Engine
    from xtrain.strategies.fsdp import FSDPStrategy

    torch.set_num_threads(1)
    strategy: Any = "ddp" if arm == "ddp" else FSDPStrategy(async_save=arm == "fsdp_async")
    engine = Engine(accelerator=accelerator, devices=2, strategy=strategy)
    engine.launch()
    cuda = engine.device.type == "cuda"
    rss_before = _rss_mb()
    torch.manual_seed(0)
    model = engine.setup_module(_net())
    optimizer = engine.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=1e-4))
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for _ in range(3):
        x = torch.randn(BATCH, WIDTH, device=engine.device)
        loss = model(x).square().mean()
        optimizer.zero_grad(set_to_none=True)
        engine.backward(loss)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    states = [v for s in optimizer.state.values() for v in s.values()]
    result: dict[str, Any] = {
        "params_mb": _local_bytes(model.parameters()) / 2**20, "optimizer_mb": _local_bytes(states) / 2**20,
        "peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else _rss_mb() - rss_before,
    }
    if arm != "ddp":
        blocked, total = [], []
        with tempfile.TemporaryDirectory() as tmp:
            tmp = engine.broadcast(tmp)
            for i in range(SAVES):
                engine.barrier()
                start = time.perf_counter()
                engine.save(Path(tmp) / f"s{i}.ckpt", {"model": model, "optimizer": optimizer})
                blocked.append(time.perf_counter() - start)
                engine.strategy.wait_for_checkpoint()  # type: ignore[attr-defined]
                engine.barrier()
                total.append(time.perf_counter() - start)
            engine.barrier()
        result |= {"save_blocked_s": statistics.median(blocked), "save_total_s": statistics.median(total)}
    if engine.is_global_zero:
        Path(out).write_text(json.dumps(result))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--worker", choices=["ddp", "fsdp", "fsdp_async"])
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.accelerator, args.out)
        return 0
    results = {}
    for arm in ("ddp", "fsdp", "fsdp_async"):
        with tempfile.TemporaryDirectory() as tmp:
            out = str(Path(tmp) / "result.json")
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
            subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", arm, "--accelerator",
                            args.accelerator, "--out", out], env=env, check=True, stdout=subprocess.DEVNULL)
            results[arm] = json.loads(Path(out).read_text())
    params = sum(p.numel() for p in _net().parameters())
    print(f"FSDP vs DDP, 2 ranks on {args.accelerator}, MLP {LAYERS}x Linear({WIDTH}) = {params / 1e6:.1f}M "
          f"parameters ({params * 4 / 2**20:.0f} MiB float32), AdamW, torch {torch.__version__}, "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"{'arm':11} {'params MiB':>11} {'optim MiB':>10} {'sum MiB':>9} {'peak MiB':>9}")
    for arm, r in results.items():
        print(f"{arm:11} {r['params_mb']:11.1f} {r['optimizer_mb']:10.1f} {r['params_mb'] + r['optimizer_mb']:9.1f} "
              f"{r['peak_mb']:9.1f}")
    ddp, fsdp = results["ddp"], results["fsdp"]
    ratio = (fsdp["params_mb"] + fsdp["optimizer_mb"]) / (ddp["params_mb"] + ddp["optimizer_mb"])
    print(f"per-rank parameters + optimizer state, FSDP / DDP: {ratio:.3f} (1/world_size = 0.500); "
          f"peak: {fsdp['peak_mb'] / ddp['peak_mb']:.3f}")
    sync, background = results["fsdp"], results["fsdp_async"]
    print(f"sharded save of model + optimizer ({(fsdp['params_mb'] + fsdp['optimizer_mb']) * 2:.0f} MiB over both "
          f"ranks), median of {SAVES}: blocks training {sync['save_blocked_s']:.3f} s synchronous, "
          f"{background['save_blocked_s']:.3f} s async (background write done after {background['save_total_s']:.3f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
