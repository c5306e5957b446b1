"""How FSDP prepares a module: which submodules become shard units, activation checkpointing, mixed precision,
and optimizers created before sharding.

Kept apart from :mod:`xtrain.strategies.fsdp` so the strategy reads as the contract it implements.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection
from typing import Any

import torch
from torch import nn

from xtrain.core.errors import ConfigError
from xtrain.core.precision import Precision

__all__ = ["ModuleSelector", "Names", "activation_checkpoint", "check_selector", "mixed_precision_policy", "param_names",
           "rebind_optimizer", "units_to_shard"]

ModuleSelector = Collection[type[nn.Module] | str] | Callable[[nn.Module], bool]
Names = dict[int, tuple["weakref.ref[nn.Parameter]", str]]


def check_selector(argument: str, value: Any) -> None:
    """Raise :class:`ConfigError` unless ``value`` is ``None``, a callable, or classes / class names."""
    if value is None or callable(value):
        return
    if isinstance(value, (str, bytes)) or not isinstance(value, Collection) or not all(
            isinstance(v, str) or (isinstance(v, type) and issubclass(v, nn.Module)) for v in value):
        raise ConfigError(argument, value, "must be module classes (or their names), or a function "
                          "module -> bool.", fix=f"write {argument}={{nn.TransformerEncoderLayer}} or "
                          f"{argument}=['Block'].")


def _matches(selector: ModuleSelector, module: nn.Module) -> bool:
    if callable(selector):
        return bool(selector(module))
    # Names match along the class hierarchy, like classes do: fully_shard turns a Block into an FSDPBlock subclass.
    names = {cls.__name__ for cls in type(module).__mro__}
    return any(s in names if isinstance(s, str) else isinstance(module, s) for s in selector)


def units_to_shard(module: nn.Module, *, policy: ModuleSelector | None, min_num_params: int | None) -> list[nn.Module]:
    """The submodules to shard as their own units, deepest first (the order ``fully_shard`` needs).

    A unit's parameters are gathered only while it runs, so smaller units mean lower peak memory. ``policy`` picks
    units by class or predicate; ``min_num_params`` picks, bottom-up, every submodule that holds at least that
    many parameters not already in a unit below it (the classic size policy).
    """
    chosen: list[nn.Module] = []
    seen: set[int] = set()

    def visit(m: nn.Module) -> int:
        if id(m) in seen:
            return 0
        seen.add(id(m))
        free = sum(p.numel() for p in m.parameters(recurse=False))
        for child in m.children():
            free += visit(child)
        if m is module:
            return free
        by_policy = policy is not None and _matches(policy, m)
        by_size = min_num_params is not None and free >= min_num_params
        if (by_policy or by_size) and any(True for _ in m.parameters()):
            chosen.append(m)
            return 0
        return free

    visit(module)
    return chosen


def activation_checkpoint(module: nn.Module, selector: ModuleSelector) -> int:
    """Recompute the activations of the selected submodules in backward instead of storing them.

    Uses the composable ``checkpoint``, which keeps parameter names unchanged (a wrapper class would prefix them
    and break checkpoints' portability). Returns how many submodules were selected.
    """
    from torch.distributed._composable.checkpoint_activation import checkpoint

    selected = [m for m in module.modules() if _matches(selector, m)]
    for m in selected:
        checkpoint(m)
    return len(selected)


def mixed_precision_policy(precision: Precision) -> Any:
    """FSDP's ``MixedPrecisionPolicy`` for an xtrain precision plugin.

    A mixed precision (float32 weights, ``compute_dtype`` math) gathers parameters in ``compute_dtype``, halving
    the all-gather traffic, and reduces gradients in float32 so the float32 weights get exact updates; its autocast
    context still runs around the step. A ``-true`` precision has already converted the weights, so FSDP keeps
    them as they are.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy

    compute = getattr(precision, "compute_dtype", None)
    if precision.param_dtype is None and isinstance(compute, torch.dtype) and compute != torch.float32:
        return MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def param_names(module: nn.Module) -> Names:
    """Parameters by identity, with their names: recorded before sharding replaces them."""
    return {id(p): (weakref.ref(p), name) for name, p in module.named_parameters()}


def rebind_optimizer(optimizer: torch.optim.Optimizer, modules: list[tuple[Names, dict[str, nn.Parameter]]]) -> None:
    """Point an optimizer created before sharding at the sharded parameters, by name.

    Args:
        optimizer: The optimizer.
        modules: For each set-up module, its parameters before sharding (:func:`param_names`) and now.

    Raises:
        ConfigError: When the optimizer already holds state for the old parameters, or holds parameters of no
            set-up module.
    """
    now = {id(p) for _, current in modules for p in current.values()}
    for group in optimizer.param_groups:
        for i, p in enumerate(group["params"]):
            if id(p) in now:
                continue
            found = next(((entry[1], current) for before, current in modules
                          if (entry := before.get(id(p))) is not None and entry[0]() is p), None)
            if found is None:
                raise ConfigError("optimizers", type(optimizer).__name__, "holds parameters that are not the "
                                  "set-up module's.", fix=_FIX)
            if optimizer.state.get(p):
                raise ConfigError("optimizers", type(optimizer).__name__, "was created and stepped before FSDP "
                                  "sharded the module, and its state belongs to the unsharded parameters.", fix=_FIX)
            group["params"][i] = found[1][found[0]]


_FIX = ("create the optimizer after sharding: model = engine.setup_module(model); optimizer = "
        "torch.optim.AdamW(model.parameters()); optimizer = engine.setup_optimizers(optimizer).")
