"""Writes what the tests compare with Lightning's documented behaviour: global_step, checkpoint names, logged keys.

Plain Python and torch only, so it is the same before and after migration.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def devices() -> int:
    return int(os.environ.get("SCRIPT_DEVICES", "1"))


def hardware(ddp: str = "ddp") -> dict[str, Any]:
    n = devices()
    return {"accelerator": "cpu", "devices": n, "strategy": ddp if n > 1 else "auto"}


def write(trainer: Any, root: str | Path, **extra: Any) -> None:
    if not trainer.is_global_zero:
        return
    root = Path(root)
    checkpoints = sorted(str(p.relative_to(root)) for p in root.rglob("*.ckpt"))
    summary = {"global_step": trainer.global_step, "current_epoch": trainer.current_epoch,
               "checkpoints": checkpoints, "callback_metrics": sorted(trainer.callback_metrics),
               "logged_metrics": sorted(trainer.logged_metrics), **extra}
    Path(os.environ["SCRIPT_OUT"]).write_text(json.dumps(summary, indent=1))


def csv_columns(root: str | Path) -> list[str]:
    """The header of the first ``metrics.csv`` under ``root`` (what a CSV logger wrote)."""
    found = sorted(Path(root).rglob("metrics.csv"))
    return sorted(found[0].read_text().splitlines()[0].split(",")) if found else []
