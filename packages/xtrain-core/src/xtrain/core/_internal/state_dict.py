"""Optimizer state keyed by parameter name.

``torch.optim.Optimizer.state_dict()`` keys state by position in the parameter list, which breaks as soon as a
checkpoint is loaded under a strategy that orders or wraps parameters differently. Keying by the module's fully
qualified parameter names (the layout ``torch.distributed.checkpoint`` uses too) makes optimizer state portable
between single-device, DDP and FSDP runs.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["by_name", "load_optimizer_state", "mark_by_name", "mark_problem", "module_names", "optimizer_state"]

_BY_NAME = "xtrain_keyed_by_name"


def module_names(module: nn.Module) -> dict[int, str]:
    """``id(parameter) -> name`` for every parameter of ``module`` (shared ones under each name)."""
    return {id(p): name for name, p in module.named_parameters(remove_duplicate=False)}


def optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()`` with parameter positions replaced by names (unchanged if a parameter is unnamed)."""
    raw = optimizer.state_dict()
    names = module_names(module)
    position_to_name: dict[int, str] = {}
    position = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            name = names.get(id(p))
            if name is None:
                return raw
            position_to_name[position] = name
            position += 1
    groups = [dict(g, params=[position_to_name[i] for i in g["params"]]) for g in raw["param_groups"]]
    state = {position_to_name[i]: s for i, s in raw["state"].items()}
    return {"state": state, "param_groups": groups, _BY_NAME: True}


def load_optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load a state written by :func:`optimizer_state` (or a plain positional one) into ``optimizer``."""
    if state.get(_BY_NAME) is not True:
        optimizer.load_state_dict(state)
        return
    names = module_names(module)
    current = [[names[id(p)] for p in group["params"]] for group in optimizer.param_groups]
    if len(current) != len(state["param_groups"]):
        raise ValueError(f"the checkpoint has {len(state['param_groups'])} parameter groups, the optimizer "
                         f"{len(current)}")
    name_to_position = {name: i for i, name in enumerate(n for group in current for n in group)}
    # Follow the current parameter order in each group: load_state_dict pairs saved and current params by position.
    groups = [dict(saved, params=[name_to_position[n] for n in names_now])
              for saved, names_now in zip(state["param_groups"], current, strict=True)]
    positional = {name_to_position[n]: s for n, s in state["state"].items() if n in name_to_position}
    optimizer.load_state_dict({"state": positional, "param_groups": groups})


def mark_by_name(state: dict[str, Any]) -> dict[str, Any]:
    """Mark an optimizer state whose ``state`` and ``params`` are already keyed by parameter names (e.g. from
    ``torch.distributed.checkpoint.state_dict.get_optimizer_state_dict``)."""
    return {**state, _BY_NAME: True}


def by_name(state: dict[str, Any]) -> dict[str, Any] | None:
    """The name-keyed optimizer state without its mark, or ``None`` if ``state`` is positional."""
    if state.get(_BY_NAME) is not True:
        return None
    return {k: v for k, v in state.items() if k != _BY_NAME}


def mark_problem(state: dict[str, Any]) -> str | None:
    """What is wrong with the name-keyed mark of a saved optimizer state (it is ``True`` or absent), if anything."""
    mark = state.get(_BY_NAME, True)
    return None if mark is True else f"{_BY_NAME} is {str(mark)[:50]!r}, not True"
