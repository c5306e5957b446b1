"""A table of the model's top-level layers and parameter counts, printed when fitting starts."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from torch import nn
from typing_extensions import override

from xtrain.core.callbacks.callback import Callback

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["ModelSummary", "summarize"]


def _count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return str(n)


def summarize(module: nn.Module, *, max_depth: int = 1) -> str:
    """A text table: name, type, parameter count of each sub-module down to ``max_depth`` (-1: all), then totals."""
    rows = [("", "Name", "Type", "Params")]
    shown = ((n, m) for n, m in module.named_modules() if n and (max_depth < 0 or n.count(".") < max_depth))
    for i, (name, child) in enumerate(shown):
        rows.append((str(i), name, type(child).__name__, _count(sum(p.numel() for p in child.parameters()))))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    total = sum(p.numel() for p in module.parameters())
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    size_mb = sum(p.numel() * p.element_size() for p in module.parameters()) / 1e6
    lines += ["-" * len(lines[0]), f"{_count(trainable)} trainable params", f"{_count(total - trainable)} "
              f"non-trainable params", f"{_count(total)} total params", f"{size_mb:.3f} MB total parameter size"]
    return "\n".join(lines)


class ModelSummary(Callback):
    """Prints :func:`summarize` of the module on global rank 0 when ``fit`` starts.

    Args:
        max_depth: How deep into nested modules the table goes: -1 for every layer, 0 for no table (as Lightning's;
            positional too, as there).
    """

    def __init__(self, max_depth: int = 1) -> None:
        self.max_depth = max_depth

    @override
    def on_fit_start(self, trainer: Trainer, module: TrainModule) -> None:
        if trainer.is_global_zero and self.max_depth != 0:
            print(summarize(module, max_depth=self.max_depth), file=sys.stderr)
