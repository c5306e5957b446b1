"""The Engine with gradient accumulation (2 backward passes per step) and collectives on odd dtypes, 2 ranks.

    python engine_accumulate.py <strategy: ddp|horovod> <output dir>

Under DDP the loop skips the first pass's sync with ``no_backward_sync``; under Horovod the strategy is given
``backward_passes_per_step=2``. Both must end with the same weights. Each rank writes ``rank<N>.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from xtrain.core import Engine
from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import tiny_dataset


def main(name: str, out: Path) -> None:
    strategy = STRATEGIES.load(name)(backward_passes_per_step=2) if name == "horovod" else name
    engine = Engine(accelerator="cpu", devices=2, strategy=strategy)
    engine.launch()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer = engine.setup(model, optimizer)
    loader = engine.setup_dataloaders(DataLoader(tiny_dataset(64), batch_size=4))
    for index, (x, y) in enumerate(loader):
        last = index % 2 == 1
        with engine.no_backward_sync(model, enabled=not last):
            engine.backward(torch.nn.functional.cross_entropy(model(x), y) / 2)
        if last:
            optimizer.step()
            optimizer.zero_grad()
    rank = engine.global_rank
    half = torch.tensor([1.5 + rank], dtype=torch.bfloat16)
    record: dict[str, Any] = {
        "rank": rank,
        "params": [p.detach().flatten().tolist() for p in model.parameters()],
        "bf16_sum": engine.all_reduce(half, "sum").float().tolist(),
        "bf16_gather": engine.all_gather(half).float().tolist(),
        "bool_gather": engine.all_gather(torch.tensor([rank == 0])).tolist(),
        "int_max": engine.all_reduce(torch.tensor([rank + 5]), "max").tolist(),
        "int_mean": engine.all_reduce(torch.tensor([rank]), "mean").tolist(),
        "broadcast": engine.broadcast({"from": rank}, 1),
    }
    engine.barrier()
    (out / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
