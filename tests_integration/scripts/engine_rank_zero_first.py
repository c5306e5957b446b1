"""Two ranks: rank 0 writes a file inside ``rank_zero_first`` (slowly); rank 1, inside the same block, must see it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from xtrain.core import Engine

marker = Path(sys.argv[1])
engine = Engine(accelerator="cpu", devices=2, strategy="ddp")
engine.launch()
with engine.rank_zero_first():
    if engine.global_rank == 0:
        time.sleep(1.0)
        marker.write_text("downloaded")
    print(f"rank {engine.global_rank} sees {marker.exists()}", flush=True)
engine.barrier()
