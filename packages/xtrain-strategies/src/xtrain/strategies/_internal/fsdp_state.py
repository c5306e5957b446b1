"""FSDP's module and optimizer state in xtrain's checkpoint format, through ``torch.distributed.checkpoint``'s
state-dict functions: sharded (DTensor entries) or full (gathered on rank 0), optimizer state keyed by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from xtrain.core.errors import CheckpointError
from xtrain.core.sharded_checkpoint import join_tensors, split_tensors
from xtrain.core.state_dict import by_name, mark_by_name

__all__ = ["empty_like", "load_module_state", "load_optimizer_state", "module_state", "optimizer_state",
           "sharded_template"]


def _options(*, full: bool, strict: bool = True) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=full, cpu_offload=full, strict=strict)


def _holds_shards(values: Iterable[Any]) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(v, DTensor) for v in values)


def module_state(module: nn.Module, *, full: bool) -> dict[str, Any]:
    """Sharded entries, or (``full``) whole tensors on rank 0 and nothing elsewhere: only rank 0 writes files."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(module, options=_options(full=full))


def optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer, *, full: bool) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return mark_by_name(dict(get_optimizer_state_dict(module, optimizer, options=_options(full=full))))


def load_module_state(module: nn.Module, state: dict[str, Any], *, strict: bool) -> None:
    """Load a sharded state (a directory read into shards) or a full one (a file from any strategy).

    The dict is copied: torch replaces a full state's entries with shards in place.
    """
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    full = not _holds_shards(state.values())
    set_model_state_dict(module, dict(state), options=_options(full=full, strict=strict))


def load_optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    named = by_name(state)
    if named is None:
        raise CheckpointError("the checkpoint's optimizer state is keyed by parameter position, so it cannot be "
                              "matched to FSDP's shards. Resave it with xtrain (every strategy keys it by name), or "
                              "load only the weights: module.load_state_dict(...), then fit without ckpt_path.")
    values = [v for entry in named.get("state", {}).values() for v in entry.values()]
    if not any(isinstance(v, torch.Tensor) and v.dim() > 0 for v in values):
        # Nothing to distribute over the shards (SGD without momentum keeps no tensors): torch's loader needs a
        # tensor to find the device and refuses; only the hyperparameters of the parameter groups are restored.
        for group, saved in zip(optimizer.param_groups, named["param_groups"], strict=True):
            group.update({k: v for k, v in saved.items() if k != "params"})
        return
    full = not _holds_shards(values)
    set_optimizer_state_dict(module, optimizer, named, options=_options(full=full))


def sharded_template(target: Any, owner: Callable[[torch.optim.Optimizer], nn.Module]) -> Any:
    """The live sharded state of a module, an optimizer or a list of optimizers: what a sharded read fills."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    if isinstance(target, nn.Module):
        return get_model_state_dict(target)
    if isinstance(target, torch.optim.Optimizer):
        return get_optimizer_state_dict(owner(target), target)
    if isinstance(target, (list, tuple)):
        return [sharded_template(t, owner) for t in target]
    return None


def empty_like(state: Any) -> Any:
    """``state`` with every tensor replaced by an uninitialized one of the same shape and sharding."""
    tensors, rest = split_tensors({"": state})
    return join_tensors(rest, {k: torch.empty_like(v) for k, v in tensors.items()})[""]
