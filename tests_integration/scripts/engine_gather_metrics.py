"""Gather evaluation outputs with ``Engine.gather_for_metrics`` under real processes; rank 0 writes what it got.

    python engine_gather_metrics.py OUT --devices 2 --samples 101 --batch-size 8
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from xtrain.core import ConfigError, Engine


class Ids(Dataset[torch.Tensor]):
    """Sample ``i`` is the id ``i``, so the gathered rows say which samples were counted."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor(index)


class Buckets(Sampler[list[int]]):
    """A custom batch sampler with batches of different sizes (bucketing by length, say)."""

    def __init__(self, n: int) -> None:
        self.batches: list[list[int]] = []
        start = 0
        while start < n:
            size = 1 + len(self.batches) % 3
            self.batches.append(list(range(start, min(start + size, n))))
            start += size

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)


def ids_of(engine: Engine, loader: Any, **kwargs: Any) -> list[int]:
    rows: list[int] = []
    for batch in loader:
        rows += engine.gather_for_metrics(batch, **kwargs).tolist()
    return rows


def main(engine: Engine, n: int, batch_size: int) -> dict[str, Any]:
    rank, world = engine.global_rank, engine.world_size
    result: dict[str, Any] = {"rank": rank}
    ordered = engine.setup_dataloaders(DataLoader(Ids(n), batch_size=batch_size))
    result["sequential"] = ids_of(engine, ordered)
    engine.seed_everything(3)  # the distributed order's seed (XTRAIN_SEED; the caller's environment may hold another)
    shuffled = engine.setup_dataloaders(DataLoader(Ids(n), batch_size=batch_size, shuffle=True))
    result["shuffled"] = ids_of(engine, shuffled)
    dropping = engine.setup_dataloaders(DataLoader(Ids(n), batch_size=batch_size, drop_last=True))
    result["drop_last"] = ids_of(engine, dropping)
    result["buckets"] = ids_of(engine, engine.setup_dataloaders(DataLoader(Ids(n), batch_sampler=Buckets(n))))
    words: list[str] = []
    for batch in ordered:
        words += engine.gather_for_metrics([f"s{i}" for i in batch.tolist()], use_gather_object=True)
    result["objects"] = words
    auto: list[str] = []
    sums: list[torch.Tensor] = []
    for batch in ordered:
        auto += engine.gather_for_metrics([f"s{i}" for i in batch.tolist()])  # strings: pickled without being asked
        sums.append(engine.gather_for_metrics(batch.sum()))  # a 0-dim value per batch: never trimmed
        per_batch = engine.gather_for_metrics([f"rank{rank}"])  # not one row per sample: nothing dropped
    result["objects_auto"] = auto
    result["sums"] = float(torch.cat(sums).sum())
    result["per_batch"] = per_batch
    correct = total = 0
    for batch in ordered:  # the usual metric: predictions and targets gathered together, then counted
        gathered = engine.gather_for_metrics({"prediction": batch % 2, "target": torch.zeros_like(batch)})
        correct += int((gathered["prediction"] == gathered["target"]).sum())
        total += len(gathered["target"])
    result["accuracy"] = [correct, total]
    train = engine.setup_dataloaders(DataLoader(Ids(5), batch_size=2))
    outer: list[int] = []
    for batch in train:  # an evaluation pass inside a training pass: each gathers for its own loader
        result["inner"] = ids_of(engine, ordered)
        outer += engine.gather_for_metrics(batch).tolist()
    result["outer"] = outer
    for _ in ordered:
        break  # a pass left early is no longer the one a gather looks at
    result["after_break"] = engine.gather_for_metrics(torch.tensor([rank])).tolist()
    result["scalars"] = engine.gather_for_metrics(torch.tensor(rank * 10)).tolist()
    result["numbers"] = engine.gather_for_metrics(2.5).tolist()
    result["ragged"] = engine.gather_for_metrics(torch.full((rank + 1,), rank)).tolist()
    padded = engine.pad_across_processes(torch.full((rank + 1, 2), rank + 1), pad_index=-1)
    first = engine.pad_across_processes({"t": torch.full((2, rank + 1), 7)}, dim=1, pad_first=True)
    result["padded"] = engine.all_gather(padded).tolist()
    result["pad_first"] = engine.all_gather(first["t"]).tolist()
    try:  # different shapes: refused on every rank alike (gloo crashed, or gave another rank's memory)
        engine.all_gather(torch.zeros(rank + 1, 2))
    except ConfigError as err:
        result["mismatch"] = str(err)
    refused = []
    for attempt in (lambda: engine.gather_for_metrics(torch.zeros(2, dtype=torch.float32 if rank else torch.int32)),
                    lambda: engine.pad_across_processes(torch.zeros(2, dtype=torch.long), pad_index=-0.5),
                    lambda: engine.pad_across_processes(torch.zeros(2, 3) if rank else torch.zeros(2), dim=1)):
        try:
            attempt()
            refused.append("")
        except ConfigError as err:
            refused.append(str(err))
    result["refused"] = refused
    result["world"] = world
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--samples", type=int, default=101)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    engine = Engine(accelerator="cpu", devices=args.devices, strategy="ddp_spawn")
    out = engine.launch(main, args.samples, args.batch_size)
    with open(args.out, "w") as f:
        json.dump(out, f)
