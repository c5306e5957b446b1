"""A table of the model's layers, parameter counts and modes (with ``example_input_array``: FLOPs and the input and
output sizes of each layer), printed when fitting starts, as Lightning's ``ModelSummary``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, nullcontext
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from typing_extensions import override

from xtrain.core.callbacks.callback import Callback

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["ModelSummary", "summarize"]

_UNKNOWN = "?"


def _count(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return str(int(n))


def _shape(value: Any) -> Any:
    """A layer's input or output as Lightning prints it: a tensor's shape as a list, nested for tuples."""
    if hasattr(value, "shape"):
        return list(value.shape)
    if isinstance(value, (list, tuple)):
        return [_shape(item) for item in value]
    return _UNKNOWN


class _Probe:
    """Runs the example input through the module once, recording each shown layer's sizes and FLOPs."""

    def __init__(self, module: nn.Module, layers: list[tuple[str, nn.Module]]) -> None:
        self.sizes: dict[str, tuple[Any, Any]] = {}
        self.flops: dict[str, int] = {}
        self.total = 0
        self._module = module
        self._layers = layers

    def run(self, example: Any, context: AbstractContextManager[Any]) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        counter = FlopCounterMode(display=False)
        modes = [(m, m.training) for m in self._module.modules()]
        self._module.eval()
        with ExitStack() as hooks:
            for name, layer in self._layers:
                hooks.callback(layer.register_forward_hook(self._recorder(name)).remove)
            try:
                with torch.no_grad(), context, counter:
                    if isinstance(example, dict):
                        self._module(**example)
                    elif isinstance(example, (list, tuple)):
                        self._module(*example)
                    else:
                        self._module(example)
            finally:
                for m, training in modes:
                    m.training = training
        root = type(self._module).__name__
        per_module = counter.get_flop_counts()
        self.flops = {name: int(sum(per_module.get(f"{root}.{name}", {}).values())) for name, _ in self._layers}
        self.total = int(counter.get_total_flops())

    def _recorder(self, name: str) -> Callable[..., None]:
        def record(layer: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
            self.sizes.setdefault(name, (_shape(inputs[0] if len(inputs) == 1 else inputs), _shape(output)))

        return record


def _layers(module: nn.Module, max_depth: int) -> Iterator[tuple[str, nn.Module]]:
    return ((n, m) for n, m in module.named_modules() if n and (max_depth < 0 or n.count(".") < max_depth))


def summarize(module: nn.Module, *, max_depth: int = 1, example_input: Any = None,
              forward_context: AbstractContextManager[Any] | None = None) -> str:
    """A text table: name, type, parameter count and mode (train/eval) of each sub-module down to ``max_depth``
    (-1: all), then totals. With ``example_input`` (on the module's device), the module runs it once in eval mode
    without gradients (inside ``forward_context``, e.g. the precision's) to add each layer's FLOPs and input and
    output sizes."""
    layers = list(_layers(module, max_depth))
    probe = _Probe(module, layers) if example_input is not None else None
    if probe is not None:
        probe.run(example_input, forward_context if forward_context is not None else nullcontext())
    header = ["", "Name", "Type", "Params", "Mode"] + (["FLOPs", "In sizes", "Out sizes"] if probe else [])
    rows = [header]
    for i, (name, child) in enumerate(layers):
        row = [str(i), name, type(child).__name__, _count(sum(p.numel() for p in child.parameters())),
               "train" if child.training else "eval"]
        if probe is not None:
            sizes = probe.sizes.get(name, (_UNKNOWN, _UNKNOWN))
            row += [_count(probe.flops.get(name, 0)), str(sizes[0]), str(sizes[1])]
        rows.append(row)
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    total = sum(p.numel() for p in module.parameters())
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    size_mb = sum(p.numel() * p.element_size() for p in module.parameters()) / 1e6
    children = [m for m in module.modules() if m is not module]
    training = sum(m.training for m in children)
    lines += ["-" * len(lines[0]), f"{_count(trainable)} trainable params", f"{_count(total - trainable)} "
              f"non-trainable params", f"{_count(total)} total params", f"{size_mb:.3f} MB total parameter size",
              f"{training} modules in train mode", f"{len(children) - training} modules in eval mode"]
    if probe is not None:
        lines.append(f"{_count(probe.total)} total FLOPs")
    return "\n".join(lines)


class ModelSummary(Callback):
    """Prints :func:`summarize` of the module on global rank 0 when ``fit`` starts; with the module's
    ``example_input_array`` set, runs it once (as Lightning's summary does) for FLOPs and layer sizes.

    Args:
        max_depth: How deep into nested modules the table goes: -1 for every layer, 0 for no table (as Lightning's;
            positional too, as there).
    """

    def __init__(self, max_depth: int = 1) -> None:
        self.max_depth = max_depth

    @override
    def on_fit_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        if self.max_depth == 0:
            return
        example = getattr(module, "example_input_array", None)
        if example is None and not trainer.is_global_zero:
            return
        context = None
        if example is not None:  # every rank runs it: a sharded module's forward is collective
            from torch.utils._pytree import tree_map

            device = trainer.strategy.root_device
            precision = trainer.strategy.precision
            example = tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, example)
            example = precision.convert_input(example) if precision.converts_input else example
            context = precision.forward_context()
        text = summarize(module, max_depth=self.max_depth, example_input=example, forward_context=context)
        if trainer.is_global_zero:
            print(text, file=sys.stderr)
