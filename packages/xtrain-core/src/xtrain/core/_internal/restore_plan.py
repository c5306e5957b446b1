"""The plan half of a restore: compare a checkpoint with everything it will be loaded into, mutating nothing.

A restore that fails half-way leaves a model with some weights from the checkpoint and some not, and torch's error
(``size mismatch for net.0.weight``) does not say which file. So a restore first compares every entry with its
target (key sets, shapes, dtypes, optimizer parameter groups, counters' types) and collects every difference; only
when there is none does anything get loaded. The checks rely on ``module.state_dict()`` (references, no copies;
sharded tensors report their global shape), so they hold for every strategy's layout.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn

from xtrain.core._internal.progress import FitProgress
from xtrain.core._internal.state_dict import by_name, mark_problem
from xtrain.core.errors import CheckpointError

__all__ = ["RestorePlan"]

_SHOWN = 8
_INT64 = 2**63  # counters and seeds live in int64 tensors and torch.Generator.manual_seed


class RestorePlan:
    """Differences between one checkpoint file and its targets; :meth:`check` raises them all at once."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.problems: list[str] = []
        self.fixes: list[str] = []

    def module(self, state: Any, module: nn.Module, *, strict: bool = True, entry: str = "state_dict") -> None:
        """Keys, shapes and dtypes of a module state against the module's own."""
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
            self.problems.append(f"{entry}: a {type(state).__name__}, not a dict of tensors keyed by name")
            return
        own = module.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if strict and missing:
            self.problems.append(f"{entry}: missing {_listed(missing)}")
        if strict and unexpected:
            self.problems.append(f"{entry}: unexpected {_listed(unexpected)}")
        for key in (k for k in own if k in state):
            self._tensor(f"{entry}: {key}", state[key], own[key])

    def _tensor(self, where: str, saved: Any, live: Any) -> None:
        if not isinstance(live, torch.Tensor):
            return
        if not isinstance(saved, torch.Tensor):
            self.problems.append(f"{where}: checkpoint holds a {type(saved).__name__}, model a tensor")
        elif saved.is_meta or saved.layout != live.layout or saved.is_quantized != live.is_quantized:
            # Same shape and dtype, but no data (meta) or another layout (sparse): torch would copy the tensors
            # before it and then fail on this one, leaving the model half loaded.
            kind = "a meta tensor (no data)" if saved.is_meta else f"a {saved.layout} tensor"
            self.problems.append(f"{where}: checkpoint holds {kind}, the model a {_layout(live)} one")
        elif tuple(saved.shape) != tuple(live.shape):
            self.problems.append(f"{where}: checkpoint {tuple(saved.shape)} vs model {tuple(live.shape)}")
        elif saved.dtype != live.dtype and not (saved.dtype.is_floating_point and live.dtype.is_floating_point):
            self.problems.append(f"{where}: checkpoint {saved.dtype} vs model {live.dtype}")

    def optimizers(self, states: Any, optimizers: Sequence[torch.optim.Optimizer],
                   names: Iterable[dict[int, str]]) -> None:
        """Count, parameter groups and per-parameter state of every optimizer (``names``: id -> name per optimizer)."""
        if not isinstance(states, list) or len(states) != len(optimizers):
            count = len(states) if isinstance(states, list) else type(states).__name__
            self.problems.append(f"optimizer_states: checkpoint holds {count} optimizer state(s), "
                                 f"configure_optimizers returned {len(optimizers)}")
            return
        for i, (state, optimizer, named) in enumerate(zip(states, optimizers, names, strict=True)):
            self._optimizer(f"optimizer_states[{i}]", state, optimizer, named)

    def _optimizer(self, where: str, state: Any, optimizer: torch.optim.Optimizer, named: dict[int, str]) -> None:
        groups = state.get("param_groups") if isinstance(state, dict) else None
        if not isinstance(groups, list) or not isinstance(state.get("state"), dict) or \
                not all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups):
            self.problems.append(f"{where}: not an optimizer state (it needs 'state' and 'param_groups')")
            return
        if len(groups) != len(optimizer.param_groups):
            self.problems.append(f"{where}: checkpoint {len(groups)} parameter group(s) vs optimizer "
                                 f"{len(optimizer.param_groups)}")
            return
        mark = mark_problem(state)
        if mark is not None:
            self.problems.append(f"{where}: {mark}")
            return
        keyed = by_name(state) is not None
        params: dict[Any, torch.Tensor] = {named.get(id(p), ""): p for g in optimizer.param_groups for p in g["params"]}
        for j, (saved, live) in enumerate(zip(groups, optimizer.param_groups, strict=True)):
            now = [named.get(id(p), "") for p in live["params"]]
            retyped = [k for k, v in saved.items() if k != "params" and k in live and not _same_hyper(v, live[k])]
            retyped += [k for k, v in saved.items() if k != "params" and k not in retyped and not _finite(v)]
            if retyped:
                self.problems.append(f"{where} group {j}: {_listed(retyped)} of another type than the optimizer's, "
                                     f"or not finite")
            # A missing hyperparameter (lr, betas, or a scheduler's max_lr that OneCycleLR reads every step) fails
            # the first step. Flags (a bool or None) that an older torch did not save are filled in on load, and
            # torch itself handles param_names.
            absent = [str(k) for k, v in live.items() if k not in saved and k != "param_names"
                      and not (v is None or isinstance(v, bool))]
            if absent:
                self.problems.append(f"{where} group {j}: {_listed(absent)} missing")
            if keyed and sorted(map(str, saved["params"])) != sorted(now):
                gone = sorted(set(now) - set(map(str, saved["params"])))
                extra = sorted(set(map(str, saved["params"])) - set(now))
                self.problems.append(f"{where} group {j}: parameters differ (missing: {_listed(gone)}; "
                                     f"unexpected: {_listed(extra)})")
            elif not keyed and len(saved["params"]) != len(now):
                self.problems.append(f"{where} group {j}: checkpoint {len(saved['params'])} parameters vs "
                                     f"optimizer {len(now)}")
        if not keyed:  # torch's own layout: the state is keyed by each parameter's position in the saved groups
            if any(len(g["params"]) != len(live["params"]) for g, live in zip(groups, optimizer.param_groups,
                                                                                 strict=True)):
                return
            params = {index: p for g, live in zip(groups, optimizer.param_groups, strict=True)
                      for index, p in zip(g["params"], live["params"], strict=True)}
        # One optimizer writes the same fields for parameters of one rank (Adafactor: row/col factors for matrices,
        # a variance for vectors).
        held = {n: e for n, e in state["state"].items() if isinstance(e, dict) and n in params}
        by_rank: dict[int, set[frozenset[str]]] = {}
        for name, entry in held.items():
            by_rank.setdefault(params[name].dim(), set()).add(frozenset(entry))
        fields = sorted(sorted(f) for found in by_rank.values() if len(found) > 1 for f in found)
        if fields:
            self.problems.append(f"{where}: the parameters' states hold different fields ({fields})")
        kinds: dict[str, set[str]] = {}
        for entry in (e for e in state["state"].values() if isinstance(e, dict)):
            for field, value in entry.items():
                kinds.setdefault(field, set()).add(_state_kind(value))
        mixed = sorted(f"{field} ({', '.join(sorted(k))})" for field, k in kinds.items() if len(k) > 1)
        if mixed:  # every parameter's state is written by the same optimizer code: one kind per field
            self.problems.append(f"{where}: fields whose kind differs between parameters: {', '.join(mixed)}")
        # A field the optimizer keeps in its parameter's shape (exp_avg, momentum_buffer) has it for every parameter.
        shaped = {f for n, e in held.items() for f, v in e.items()
                  if isinstance(v, torch.Tensor) and v.dim() and v.shape == params[n].shape}
        if type(optimizer).__module__.startswith("torch.optim"):
            shaped |= _TORCH_SHAPED
        for name, entry in state["state"].items():
            param = params.get(name)
            if param is None or not isinstance(entry, dict):
                self.problems.append(f"{where}: state for {name!r}, which the optimizer does not hold")
                continue
            for field, value in entry.items():
                if not isinstance(value, (torch.Tensor, int, float, list, tuple)) or (
                        field == "step" and not isinstance(value, (torch.Tensor, int, float))):
                    self.problems.append(f"{where}: {name}.{field}: a {type(value).__name__}")
                elif isinstance(value, torch.Tensor) and value.shape != param.shape and (
                        field in shaped or (value.dim() and _not_reduced(value, param))):
                    self.problems.append(f"{where}: {name}.{field}: checkpoint {tuple(value.shape)} vs parameter "
                                         f"{tuple(param.shape)}")

    def loops(self, state: Any) -> None:
        """Try the counters on a scratch copy: the live loop state is loaded only if this one takes them."""
        if not isinstance(state, dict):
            self.problems.append(f"loops: a {type(state).__name__}, not a dict of counters")
            return
        missing = [k for k in FitProgress().state_dict() if k not in state]  # every xtrain checkpoint has them all
        if missing:
            self.problems.append(f"loops: {_listed(missing)} missing")
            return
        odd = [str(k) for k, v in state.items() if not isinstance(v, int) or isinstance(v, bool)]
        if odd:
            self.problems.append(f"loops: {_listed(odd)} not whole numbers")
            return
        try:
            scratch = FitProgress()
            scratch.load_state_dict(state)
        except (TypeError, ValueError, OverflowError) as err:
            self.problems.append(f"loops: {err}")
            return
        counters = scratch.state_dict()
        outside = [k for k, v in counters.items() if not 0 <= v < _INT64]
        if outside:
            self.problems.append(f"loops: counters {_listed(outside)} negative or beyond 64 bits")
        elif counters["batches_in_epoch"] > counters["total_batches"]:
            self.problems.append(f"loops: batches_in_epoch={counters['batches_in_epoch']} is more than the run's "
                                 f"total_batches={counters['total_batches']}")

    def like(self, where: str, saved: Any, live: Any, *, top: bool = True) -> None:
        """A saved state dict against the live object's own ``state_dict()``: every key there, of the same kind.

        Only the top level's keys must all be there (they are the object's fields); a nested dict may be data keyed
        by what the run did (``ModelCheckpoint.best_k_models`` by file), so below it only shared keys are compared.
        """
        if isinstance(saved, (list, tuple)) and isinstance(live, (list, tuple)) and len(saved) == len(live):
            for i, (a, b) in enumerate(zip(saved, live, strict=True)):
                self.like(f"{where}[{i}]", a, b, top=False)
            return
        if not isinstance(saved, dict) or not isinstance(live, dict):
            if not _same_kind(saved, live):
                self.problems.append(f"{where}: a {type(saved).__name__}, the live state a {type(live).__name__}")
            return
        missing = [str(k) for k in live if k not in saved]
        if missing and top:
            self.problems.append(f"{where}: missing {_listed(missing)}")
        for key in (k for k in live if k in saved):
            self.like(f"{where}.{key}", saved[key], live[key], top=False)
        if not top and live:  # data keyed by the run: new keys' values must be of the kind the live ones share
            sample = next(iter(live.values()))
            if all(_same_kind(v, sample) for v in live.values()):
                odd = [str(k) for k, v in saved.items() if k not in live and not _same_kind(v, sample)]
                if odd:
                    self.problems.append(f"{where}: {_listed(odd)} of another type than the live entries "
                                         f"({type(sample).__name__})")

    def scheduler(self, where: str, saved: Any, scheduler: Any) -> None:
        """A learning-rate scheduler's state: as :meth:`like`, and no key that would replace one of its methods or
        its optimizer (torch's ``load_state_dict`` sets every key as an attribute). Other extra keys are kept: an
        older torch may have saved fields this one no longer has."""
        live = scheduler.state_dict()
        self.like(where, saved, live)
        if isinstance(saved, dict):
            shadowing = [str(k) for k in saved if not isinstance(k, str) or k == "optimizer"
                         or (k not in vars(scheduler) and hasattr(type(scheduler), k))]
            if shadowing:
                self.problems.append(f"{where}: {_listed(shadowing)} would replace the scheduler's own attributes")
            # A NaN counter or rate (last_epoch, base_lrs) would train on NaN learning rates from the first step.
            nan = [str(k) for k, v in saved.items() if k in live and _finite(live[k]) and not _finite(v)]
            if nan:
                self.problems.append(f"{where}: {_listed(nan)} not finite")

    def rng(self, state: Any) -> None:
        """Try this rank's generator states on the live generators, then put the live states back."""
        from xtrain.core._internal.rng import collect_rng_states, restore_rng_states

        live = collect_rng_states()
        try:
            if not isinstance(state, dict):
                raise TypeError(f"a {type(state).__name__}, not a dict")
            restore_rng_states(state)
        except Exception as err:  # noqa: BLE001 - whatever the generators reject is one problem
            self.problems.append(f"rng: {type(err).__name__}: {str(err)[:200]}")
        finally:
            restore_rng_states(live)

    def sampler(self, state: Any) -> None:
        """The resumable sampler's state: an epoch number and a seed."""
        if state is None:
            return
        ok = isinstance(state, dict) and set(state) == {"epoch", "epoch_seed"} and all(
            (isinstance(v, int) and not isinstance(v, bool) and 0 <= v < _INT64) or (k == "epoch_seed" and v is None)
            for k, v in state.items())
        if not ok:
            self.problems.append(f"sampler: {str(state)[:100]} is not {{'epoch': int, 'epoch_seed': int}} with "
                                 f"both in [0, 2**63)")

    def entries(self, checkpoint: dict[str, Any], kinds: dict[str, type | tuple[type, ...]]) -> None:
        """Entries that must have a container type when present (callback states, scheduler states...)."""
        for key, kind in kinds.items():
            if key in checkpoint and not isinstance(checkpoint[key], kind):
                self.problems.append(f"{key}: a {type(checkpoint[key]).__name__}")

    def states(self, key: str, states: Any, count: int | None = None) -> None:
        """A list (or dict) of per-object state dicts, e.g. schedulers', callbacks', loggers'."""
        values = states.values() if isinstance(states, dict) else states
        if not isinstance(states, (list, dict)) or not all(isinstance(s, dict) for s in values):
            self.problems.append(f"{key}: not a collection of state dicts")
        elif count is not None and len(states) != count:
            self.problems.append(f"{key}: checkpoint holds {len(states)}, this run has {count}")

    def check(self) -> None:
        """Raise one :class:`CheckpointError` listing the first differences, or return if there are none."""
        if not self.problems:
            return
        shown = "\n  ".join(self.problems[:_SHOWN])
        more = f"\n  ... and {len(self.problems) - _SHOWN} more" if len(self.problems) > _SHOWN else ""
        fixes = " ".join(self.fixes)
        raise CheckpointError(f"checkpoint {self.path!r} does not fit this run; nothing was loaded:\n  {shown}{more}"
                              f"\nFix: {fixes or 'build the model and optimizers as they were when it was saved.'}")


def _state_kind(value: Any) -> str:
    """The kind of a per-parameter optimizer state field: a tensor, a number or a sequence (or the type's name)."""
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "number"
    return "sequence" if isinstance(value, (list, tuple)) else type(value).__name__


# Optimizer state fields that torch.optim's optimizers keep in their parameter's shape.
_TORCH_SHAPED = frozenset({"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "exp_inf", "momentum_buffer", "square_avg",
                           "acc_delta", "sum", "grad_avg", "prev", "ax"})


def _finite(value: Any) -> bool:
    """Whether a hyperparameter holds no NaN or infinite number (a NaN learning rate trains NaN weights)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    return True


def _same_hyper(saved: Any, live: Any) -> bool:
    """:func:`_same_kind` for an optimizer hyperparameter, whose sequences have a fixed length (Adam's two betas)."""
    if isinstance(live, (list, tuple)):
        return isinstance(saved, (list, tuple)) and len(saved) == len(live) and all(
            _same_kind(s, v) for s, v in zip(saved, live, strict=True))
    return _same_kind(saved, live)


def _same_kind(saved: Any, live: Any) -> bool:
    """Whether a saved hyperparameter can stand in for the live one (numbers for numbers, sequences for sequences)."""
    if live is None:
        return True
    if saved is None:
        return isinstance(live, bool)  # optimizer flags (foreach, fused) are None or a bool across torch versions
    for kind in (bool, str, torch.Tensor, (list, tuple), dict):
        if isinstance(live, kind):
            return isinstance(saved, kind)
    if isinstance(live, (int, float)):
        return isinstance(saved, (int, float)) and not isinstance(saved, bool)
    return True


def _not_reduced(value: torch.Tensor, param: torch.Tensor) -> bool:
    """Whether a same-rank state tensor is neither the parameter's shape nor a reduction of it to size 1 along some
    dimensions (Adafactor's row and column factors are such reductions)."""
    return value.dim() == param.dim() and any(v not in (1, p) for v, p in zip(value.shape, param.shape, strict=True))


def _layout(tensor: torch.Tensor) -> str:
    return "quantized" if tensor.is_quantized else "dense" if tensor.layout == torch.strided else str(tensor.layout)


def _listed(keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:_SHOWN])
    return f"{shown}, ... ({len(keys)} in all)" if len(keys) > _SHOWN else shown or "(none)"
