"""A plain loop on the Engine under fsdp: save, load, and saves killed half-way.

    python engine_fsdp.py roundtrip OUT '<FSDPStrategy options as json>'
    python engine_fsdp.py killme OUT <fraction>

``roundtrip``: train 3 steps (the optimizer created before sharding, passed to ``engine.setup``), save, train 3 more
steps recording the losses, then load the checkpoint into a fresh model and optimizer and train the same 3 steps
again. Rank 0 writes ``roundtrip.json`` (both loss lists, the weights at the save) to OUT.

``killme``: saves ``{"model", "i"}`` to OUT/last.ckpt over and over with every weight equal to ``i``; during the
third save a timer SIGKILLs this rank at ``fraction`` of the second save's duration (the other rank dies with it).
Each completed save is announced on stdout, so the test can tell a kill landed mid-save.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from xtrain.core import Engine, seed_everything
from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import tiny_dataset


def full(tensor: torch.Tensor) -> torch.Tensor:
    gather = getattr(tensor, "full_tensor", None)
    return gather() if callable(gather) else tensor


def make_engine(options: dict[str, Any]) -> Engine:
    strategy = STRATEGIES.load("fsdp")(**options)  # type: ignore[operator]
    engine = Engine(accelerator="cpu", devices=2, strategy=strategy)
    engine.launch()
    return engine


def model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def steps(engine: Engine, net: Any, optimizer: torch.optim.Optimizer, batches: list[Any]) -> list[float]:
    losses = []
    for x, y in batches:
        loss = torch.nn.functional.cross_entropy(net(x), y)
        optimizer.zero_grad()
        engine.backward(loss)
        optimizer.step()
        losses.append(float(engine.all_reduce(loss.detach())))
    return losses


def roundtrip(out: Path, options: dict[str, Any]) -> None:
    engine = make_engine(options)
    seed_everything(3)
    torch.set_num_threads(1)
    data = tiny_dataset(96)
    rank = engine.global_rank
    batches = [(data.tensors[0][i:i + 8], data.tensors[1][i:i + 8]) for i in range(rank * 8, 96, 16)]
    first = model()
    net, optimizer = engine.setup(first, torch.optim.AdamW(first.parameters(), lr=0.01))  # before sharding
    steps(engine, net, optimizer, batches[:3])
    path = out / "engine.ckpt"
    engine.save(path, {"model": net, "optimizer": optimizer, "step": 3})
    saved = {k: full(v.detach()).tolist() for k, v in sorted(first.state_dict().items())}
    reference = steps(engine, net, optimizer, batches[3:])
    torch.manual_seed(99)  # different initial weights: the load must replace them
    second = engine.setup_module(model())
    fresh = engine.setup_optimizers(torch.optim.AdamW(second.parameters(), lr=0.01))
    rest = engine.load(path, {"model": second, "optimizer": fresh})
    resumed = steps(engine, second, fresh, batches[3:])
    if engine.is_global_zero:
        (out / "roundtrip.json").write_text(json.dumps({"reference": reference, "resumed": resumed,
                                                        "rest": rest, "saved": saved}))


def killme(out: Path, fraction: float) -> None:
    engine = make_engine({})
    net = engine.setup_module(torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.Linear(1024, 512)))
    path = out / "last.ckpt"
    took = 0.0
    for i in range(1, 1000):
        with torch.no_grad():
            for p in net.parameters():
                p.fill_(float(i))
        if i == 3 and engine.is_global_zero:
            print(f"killing during save {i}", flush=True)  # before the timer: a short one may fire at once
            threading.Timer(took * fraction, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
        start = time.perf_counter()
        engine.save(path, {"model": net, "i": i})
        if i == 2:  # the first save also pays for imports
            took = time.perf_counter() - start
        if engine.is_global_zero:
            print(f"saved {i}", flush=True)


if __name__ == "__main__":
    mode, out_dir = sys.argv[1], Path(sys.argv[2])
    if mode == "roundtrip":
        roundtrip(out_dir, json.loads(sys.argv[3]))
    else:
        killme(out_dir, float(sys.argv[3]))
