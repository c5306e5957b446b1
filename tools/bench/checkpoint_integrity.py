"""Throughput of checkpoint save and load with checksums on and off, against raw ``torch.save`` + fsync.

A ~400 MB checkpoint (100 float32 tensors of 1M elements in a Trainer-shaped dict) is saved and loaded by four arms,
interleaved for several rounds so that machine load hits them alike:

- ``raw``: ``torch.save`` to a file + fsync, ``torch.load(weights_only=True)``: the durable-write limit.
- ``off``: ``TorchCheckpointIO(checksums=False)``: atomic write (temp file, fsync, rename), no verification.
- ``on``: ``TorchCheckpointIO()`` (the default): the same, with the zip records' CRC-32s written by torch.save and
  every record verified before the load.
- ``sharded``: the same checkpoint as a sharded directory (ShardedSaver, one process), checksums on and off.

Reported: MB/s per arm (minimum and median over rounds) and the on/off ratios; the target is ``on >= 0.9 x off``.

Run:  python tools/bench/checkpoint_integrity.py [--mb 400] [--rounds 5] [--dir /tmp/xtrain-bench]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from xtrain.core import Engine
from xtrain.core.checkpoint_reader import read_checkpoint
from xtrain.core.defaults.torch_io import TorchCheckpointIO
from xtrain.core.sharded_saver import ShardedSaver


def make_checkpoint(mb: int) -> dict[str, Any]:
    n = max(1, mb * 2**20 // (4 * 2**20))
    return {"xtrain": {"format_version": 1, "strategy": "bench", "world_size": 1, "layout": "full"},
            "state_dict": {f"layer{i}.weight": torch.randn(1024, 1024) for i in range(n)},
            "loops": {"epoch": 1, "global_step": 100}}


def raw_save(checkpoint: dict[str, Any], path: Path) -> None:
    with path.open("wb") as f:
        torch.save(checkpoint, f)
        f.flush()
        os.fsync(f.fileno())


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="xtrain-bench-", dir=args.dir))
    warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
    checkpoint = make_checkpoint(args.mb)
    size_mb = sum(t.numel() * 4 for t in checkpoint["state_dict"].values()) / 2**20
    on_io, off_io = TorchCheckpointIO(), TorchCheckpointIO(checksums=False)
    arms: dict[str, tuple[Callable[[Path], Any], Callable[[Path], Any]]] = {
        "raw": (lambda p: raw_save(checkpoint, p), lambda p: torch.load(p, weights_only=True)),
        "off": (lambda p: off_io.save_checkpoint(checkpoint, p), lambda p: off_io.load_checkpoint(p)),
        "on": (lambda p: on_io.save_checkpoint(checkpoint, p), lambda p: on_io.load_checkpoint(p)),
    }

    def sharded(checksums: bool) -> tuple[Callable[[Path], Any], Callable[[Path], Any]]:
        # The sharded saver follows the strategy's CheckpointIO setting.
        engine = Engine(accelerator="cpu", devices=1, plugins=[TorchCheckpointIO(checksums=checksums)])
        engine.launch()
        saver = ShardedSaver(engine.strategy)
        return lambda p: saver.save(checkpoint, p), lambda p: read_checkpoint(p, verify=checksums)

    arms["sharded-off"], arms["sharded-on"] = sharded(False), sharded(True)
    times: dict[str, dict[str, list[float]]] = {arm: {"save": [], "load": []} for arm in arms}
    for _ in range(args.rounds):
        for arm, (save, load) in arms.items():
            path = root / f"{arm}.ckpt"
            times[arm]["save"].append(timed(lambda: save(path)))  # noqa: B023 - called at once
            times[arm]["load"].append(timed(lambda: load(path)))  # noqa: B023 - called at once
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    print(f"checkpoint: {size_mb:.0f} MB, {args.rounds} rounds, MB/s (best / median)")
    for arm in arms:
        cells = [f"{op} {size_mb / min(times[arm][op]):7.0f} / {size_mb / statistics.median(times[arm][op]):7.0f}"
                 for op in ("save", "load")]
        print(f"  {arm:<12} " + "   ".join(cells))
    for on, off in (("on", "off"), ("sharded-on", "sharded-off"), ("on", "raw")):
        for op in ("save", "load"):
            best = min(times[off][op]) / min(times[on][op])
            median = statistics.median(times[off][op]) / statistics.median(times[on][op])
            print(f"  {on} / {off} {op}: {best:.2f}x (best), {median:.2f}x (median)")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
