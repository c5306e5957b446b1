"""The optimizer half of a restore plan: an optimizer state from a checkpoint against the optimizer it will load into.

torch's ``Optimizer.load_state_dict`` checks only the number of parameter groups and parameters; a state that passes
and holds a hyperparameter of another kind (``betas`` as a number), a NaN or negative learning rate, or momentum
buffers of another shape loads, then fails at the first step or trains on nonsense. These checks run before
anything is loaded (see :mod:`~xtrain.core._internal.restore_plan`).
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch

from xtrain.core._internal.plan_values import finite, listed, same_kind
from xtrain.core._internal.state_dict import by_name, mark_problem

__all__ = ["optimizer_problems"]

# Optimizer state fields that torch.optim's optimizers keep in their parameter's shape.
_TORCH_SHAPED = frozenset({"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "exp_inf", "momentum_buffer", "square_avg",
                           "acc_delta", "sum", "grad_avg", "prev", "ax"})
# Flags of torch.optim groups that need a per-parameter state field once a step was taken.
_FLAG_FIELDS = {"amsgrad": "max_exp_avg_sq"}
_NOT_CAPTURABLE = frozenset({"cpu", "mps"})  # devices torch's capturable optimizer steps refuse
# How a torch.optim optimizer runs, not what it computes: left out when its constructor checks the hyperparameters
# (fused=True needs parameters on an accelerator).
_IMPLEMENTATION = frozenset({"foreach", "fused", "capturable", "differentiable"})


def optimizer_problems(where: str, state: Any, optimizer: torch.optim.Optimizer, named: dict[int, str]) -> list[str]:
    """What keeps ``state`` (an optimizer's saved state) from loading into ``optimizer`` as it was saved: parameter
    groups, hyperparameters (kind, length, finite, sign), the parameters' names or count, and the per-parameter
    state's fields and shapes. ``named`` maps each parameter's id to its name."""
    problems: list[str] = []
    groups = state.get("param_groups") if isinstance(state, dict) else None
    if not isinstance(groups, list) or not isinstance(state.get("state"), dict) or \
            not all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups):
        problems.append(f"{where}: not an optimizer state (it needs 'state' and 'param_groups')")
        return problems
    odd = [j for j, g in enumerate(groups)
           if not all(isinstance(i, (str, int)) and not isinstance(i, bool) for i in g["params"])]
    if odd:  # torch saves indices, xtrain names: anything else cannot key the state (a list is not even hashable)
        problems.append(f"{where}: group(s) {odd} list parameters that are neither names nor indices")
        return problems
    if len(groups) != len(optimizer.param_groups):
        problems.append(f"{where}: checkpoint {len(groups)} parameter group(s) vs optimizer "
                        f"{len(optimizer.param_groups)}")
        return problems
    mark = mark_problem(state)
    if mark is not None:
        problems.append(f"{where}: {mark}")
        return problems
    keyed = by_name(state) is not None
    params: dict[Any, torch.Tensor] = {named.get(id(p), ""): p for g in optimizer.param_groups for p in g["params"]}
    for j, (saved, live) in enumerate(zip(groups, optimizer.param_groups, strict=True)):
        now = [named.get(id(p), "") for p in live["params"]]
        retyped = [k for k, v in saved.items() if k != "params" and k in live and not _same_hyper(v, live[k])]
        retyped += [k for k, v in saved.items() if k != "params" and k not in retyped and not finite(v)]
        if retyped:
            problems.append(f"{where} group {j}: {listed(retyped)} of another type than the optimizer's, "
                            f"or not finite")
        flipped = [str(k) for k, v in saved.items() if k in live and k not in retyped and _flipped(v, live[k])]
        if flipped:
            problems.append(f"{where} group {j}: {listed(flipped)} negative where the optimizer's is not (torch "
                            f"refuses a negative lr, eps, weight_decay or momentum when an optimizer is built)")
        # A missing hyperparameter (lr, betas, or a scheduler's max_lr that OneCycleLR reads every step) fails
        # the first step. Flags (a bool or None) that an older torch did not save are filled in on load, and
        # torch itself handles param_names.
        refused = _constructor_refuses(optimizer, saved) if not retyped and not flipped else None
        if refused:
            problems.append(f"{where} group {j}: {type(optimizer).__name__} refuses these hyperparameters when it is "
                            f"built ({refused})")
        absent = [str(k) for k, v in live.items() if k not in saved and k != "param_names"
                  and not (v is None or isinstance(v, bool))]
        if absent:
            problems.append(f"{where} group {j}: {listed(absent)} missing")
        if keyed and sorted(map(str, saved["params"])) != sorted(now):
            gone = sorted(set(now) - set(map(str, saved["params"])))
            extra = sorted(set(map(str, saved["params"])) - set(now))
            problems.append(f"{where} group {j}: parameters differ (missing: {listed(gone)}; "
                            f"unexpected: {listed(extra)})")
        elif not keyed and len(saved["params"]) != len(now):
            problems.append(f"{where} group {j}: checkpoint {len(saved['params'])} parameters vs "
                            f"optimizer {len(now)}")
    if not keyed:  # torch's own layout: the state is keyed by each parameter's position in the saved groups
        if any(len(g["params"]) != len(live["params"]) for g, live in zip(groups, optimizer.param_groups,
                                                                             strict=True)):
            return problems
        params = {index: p for g, live in zip(groups, optimizer.param_groups, strict=True)
                  for index, p in zip(g["params"], live["params"], strict=True)}
    # One optimizer writes the same fields for parameters of one rank (Adafactor: row/col factors for matrices,
    # a variance for vectors).
    held = {n: e for n, e in state["state"].items() if isinstance(e, dict) and n in params}
    by_rank: dict[int, set[frozenset[str]]] = {}
    for name, entry in held.items():
        by_rank.setdefault(params[name].dim(), set()).add(frozenset(entry))
    fields = sorted(sorted(map(str, f)) for found in by_rank.values() if len(found) > 1 for f in found)
    if fields:
        problems.append(f"{where}: the parameters' states hold different fields ({fields})")
    kinds: dict[str, set[str]] = {}
    for entry in (e for e in state["state"].values() if isinstance(e, dict)):
        for field, value in entry.items():
            kinds.setdefault(field, set()).add(_state_kind(value))
    mixed = sorted(f"{field} ({', '.join(sorted(k))})" for field, k in kinds.items() if len(k) > 1)
    if mixed:  # every parameter's state is written by the same optimizer code: one kind per field
        problems.append(f"{where}: fields whose kind differs between parameters: {', '.join(mixed)}")
    # A field the optimizer keeps in its parameter's shape (exp_avg, momentum_buffer) has it for every parameter.
    shaped = {f for n, e in held.items() for f, v in e.items()
              if isinstance(v, torch.Tensor) and v.dim() and v.shape == params[n].shape}
    if type(optimizer).__module__.startswith("torch.optim"):
        shaped |= _TORCH_SHAPED
    for name, entry in state["state"].items():
        param = params.get(name)
        if param is None or not isinstance(entry, dict):
            problems.append(f"{where}: state for {name!r}, which the optimizer does not hold")
            continue
        for field, value in entry.items():
            if not isinstance(value, (torch.Tensor, int, float, list, tuple)) or (
                    field == "step" and not isinstance(value, (torch.Tensor, int, float))):
                problems.append(f"{where}: {name}.{field}: a {type(value).__name__}")
            elif field == "step" and isinstance(value, torch.Tensor) and value.numel() != 1:
                problems.append(f"{where}: {name}.step: a tensor of shape {tuple(value.shape)}, not one count")
            elif field == "step" and not _a_count(value):
                problems.append(f"{where}: {name}.step: {_number(value)}, not a count of steps taken")
            elif isinstance(value, torch.Tensor) and value.shape != param.shape and (
                    field in shaped or (value.dim() and _not_reduced(value, param))):
                problems.append(f"{where}: {name}.{field}: checkpoint {tuple(value.shape)} vs parameter "
                                f"{tuple(param.shape)}")
    problems += _flag_problems(where, groups, state["state"], optimizer)
    return problems


def _flag_problems(where: str, groups: list[dict[str, Any]], states: dict[Any, Any],
                   optimizer: torch.optim.Optimizer) -> list[str]:
    """Saved flags that the state or the parameters cannot serve: torch reads them at the next step, after the
    restore (``amsgrad=True`` with no ``max_exp_avg_sq``: a KeyError; ``capturable=True`` on the CPU: an assertion)."""
    problems: list[str] = []
    for j, (saved, live) in enumerate(zip(groups, optimizer.param_groups, strict=True)):
        for flag, field in _FLAG_FIELDS.items():
            if saved.get(flag) is True and flag in live:
                lacking = [str(k) for k in saved["params"] if isinstance(states.get(k), dict) and states[k]
                           and field not in states[k]]
                if lacking:
                    problems.append(f"{where} group {j}: {flag}=True, but the state of {listed(lacking)} has no "
                                    f"{field!r} (the optimizer needs it at its next step)")
        devices = sorted({p.device.type for p in live["params"]} & _NOT_CAPTURABLE)
        if saved.get("capturable") is True and "capturable" in live and devices:
            problems.append(f"{where} group {j}: capturable=True, which torch's optimizers refuse for parameters on "
                            f"{', '.join(devices)} (the checkpoint's flags replace the optimizer's)")
    return problems


def _number(step: Any) -> float:
    return float(step)


def _a_count(step: Any) -> bool:
    """Whether a saved ``step`` (a number or a one-element tensor) counts steps: finite and not negative."""
    return 0 <= _number(step) < math.inf


def _constructor_refuses(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> str | None:
    """What torch's own optimizer refuses in ``saved``'s hyperparameters when built (``betas=(5.0, 0.999)``), as
    its constructor says it; loading skips those checks. Only torch.optim's classes are built: a third party's may
    allocate or communicate in its constructor."""
    cls = type(optimizer)
    if not cls.__module__.startswith("torch.optim"):
        return None
    accepted = inspect.signature(cls.__init__).parameters
    hyper = {k: v for k, v in saved.items() if k in accepted and k not in _IMPLEMENTATION and k != "params"}
    try:
        cls([torch.zeros(1, requires_grad=True)], **hyper)
    except (ValueError, TypeError, RuntimeError) as err:
        return str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
    return None


def _state_kind(value: Any) -> str:
    """The kind of a per-parameter optimizer state field: a tensor, a number or a sequence (or the type's name)."""
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "number"
    return "sequence" if isinstance(value, (list, tuple)) else type(value).__name__


def _flipped(saved: Any, live: Any) -> bool:
    """Whether a saved hyperparameter (or one of its numbers) is negative where the live one is not: a negative
    learning rate climbs the loss, and torch's optimizers refuse one when built but not when loaded."""
    if isinstance(live, (list, tuple)) and isinstance(saved, (list, tuple)):
        return any(_flipped(s, v) for s, v in zip(saved, live, strict=False))
    numbers = (int, float)
    return (isinstance(saved, numbers) and isinstance(live, numbers) and not isinstance(live, bool)
            and live >= 0 > saved)


def _same_hyper(saved: Any, live: Any) -> bool:
    """``same_kind`` for an optimizer hyperparameter, whose sequences have a fixed length (Adam's two betas)."""
    if isinstance(live, (list, tuple)):
        return isinstance(saved, (list, tuple)) and len(saved) == len(live) and all(
            same_kind(s, v) for s, v in zip(saved, live, strict=True))
    return same_kind(saved, live)


def _not_reduced(value: torch.Tensor, param: torch.Tensor) -> bool:
    """Whether a same-rank state tensor is neither the parameter's shape nor a reduction of it to size 1 along some
    dimensions (Adafactor's row and column factors are such reductions)."""
    return value.dim() == param.dim() and any(v not in (1, p) for v, p in zip(value.shape, param.shape, strict=True))
