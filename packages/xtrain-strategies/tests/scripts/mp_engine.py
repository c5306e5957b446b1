"""The Engine under model_parallel: ``parallelize=fn`` applies tensor parallelism (the Engine has no
configure_model); rank 0 writes the losses and full weights to OUT/engine.json.

    python mp_engine.py OUT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from fsdp_run import full_params

from xtrain.core import Engine, seed_everything


def parallelize(module: torch.nn.Module, mesh: Any) -> None:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    parallelize_module(module, mesh["tensor_parallel"], {"0": ColwiseParallel(), "2": RowwiseParallel()})


def main(out: Path) -> None:
    from xtrain.strategies import ModelParallelStrategy

    seed_everything(0)
    torch.set_num_threads(1)
    engine = Engine(accelerator="cpu", devices=2,
                    strategy=ModelParallelStrategy(tensor_parallel=2, parallelize=parallelize))
    engine.launch()
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    module = engine.setup(net)
    optimizer = engine.setup_optimizers(torch.optim.SGD(module.parameters(), lr=0.1))
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(3):
        x, y = torch.randn(8, 8, generator=g), torch.randint(0, 4, (8,), generator=g)
        loss = torch.nn.functional.cross_entropy(module(x), y)
        optimizer.zero_grad()
        engine.backward(loss)
        optimizer.step()
        losses.append(float(loss.detach()))
    types = sorted({type(p).__name__ for p in net.parameters()})
    params = full_params(net)
    if engine.global_rank == 0:
        (out / "engine.json").write_text(json.dumps({"losses": losses, "params": params, "types": types}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
