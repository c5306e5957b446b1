"""The plan half of a restore: compare a checkpoint with everything it will be loaded into, mutating nothing.

A restore that fails half-way leaves a model with some weights from the checkpoint and some not, and torch's error
(``size mismatch for net.0.weight``) does not say which file. So a restore first compares every entry with its
target (key sets, shapes, dtypes, optimizer parameter groups, counters' types) and collects every difference; only
when there is none does anything get loaded. The checks rely on ``module.state_dict()`` (references, no copies;
sharded tensors report their global shape), so they hold for every strategy's layout.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn

from xtrain.core._internal.optimizer_plan import optimizer_problems
from xtrain.core._internal.plan_values import SHOWN, finite, listed, same_kind
from xtrain.core._internal.progress import FitProgress
from xtrain.core.errors import CheckpointError

__all__ = ["STRICT_LOADING_FIX", "RestorePlan", "filled_by_torch", "only_lacks_weights"]

_INT64 = 2**63  # counters and seeds live in int64 tensors and torch.Generator.manual_seed


def filled_by_torch(state: Any, module: nn.Module) -> set[str]:
    """Keys a state may lack that ``load_state_dict`` fills itself, strict or not: a batch norm's
    ``num_batches_tracked`` in a state saved before torch had it (its metadata says version < 2, or has no version,
    as in a state dict rebuilt by hand). Lightning, which leaves the check to torch, accepts such files."""
    versions = getattr(state, "_metadata", None) or {}
    found = set()
    for name, child in module.named_modules():
        if isinstance(child, nn.modules.batchnorm._NormBase) and child.track_running_stats:
            version = versions.get(name, {}).get("version")
            if version is None or version < 2:
                found.add(f"{name}.num_batches_tracked" if name else "num_batches_tracked")
    return found


STRICT_LOADING_FIX = ("the file lacks some of the module's weights: set self.strict_loading = False in the module's "
                      "__init__ (as in Lightning) to load those it has.")


def only_lacks_weights(state: Any, module: nn.Module) -> bool:
    """Whether ``state`` fits ``module`` but for weights it does not have (a fine-tune's frozen layers): some are
    missing, and there is no key the module lacks and no other shape. The fix for that is a non-strict load, not
    other hyperparameters."""
    own = module.state_dict()
    return isinstance(state, dict) and all(
        key in own and (not isinstance(value, torch.Tensor) or value.shape == own[key].shape)
        for key, value in state.items()) and bool(own.keys() - state.keys() - filled_by_torch(state, module))


class RestorePlan:
    """Differences between one checkpoint file and its targets; :meth:`check` raises them all at once."""

    def __init__(self, path: str, *, target: str = "this run") -> None:
        self.path = path
        self.target = target
        self.problems: list[str] = []
        self.fixes: list[str] = []

    def module(self, state: Any, module: nn.Module, *, strict: bool = True, entry: str = "state_dict") -> None:
        """Keys, shapes and dtypes of a module state against the module's own."""
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
            self.problems.append(f"{entry}: a {type(state).__name__}, not a dict of tensors keyed by name")
            return
        own = module.state_dict(keep_vars=True)
        filled = filled_by_torch(state, module)
        missing = [k for k in own if k not in state and k not in filled]
        unexpected = [k for k in state if k not in own]
        if strict and missing:
            self.problems.append(f"{entry}: missing {listed(missing)}")
        if strict and unexpected:
            self.problems.append(f"{entry}: unexpected {listed(unexpected)}")
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
            self.problems += optimizer_problems(f"optimizer_states[{i}]", state, optimizer, named)

    def loops(self, state: Any) -> None:
        """Try the counters on a scratch copy: the live loop state is loaded only if this one takes them."""
        if not isinstance(state, dict):
            self.problems.append(f"loops: a {type(state).__name__}, not a dict of counters")
            return
        missing = [k for k in FitProgress().state_dict() if k not in state]  # every xtrain checkpoint has them all
        if missing:
            self.problems.append(f"loops: {listed(missing)} missing")
            return
        odd = [str(k) for k, v in state.items() if not isinstance(v, int) or isinstance(v, bool)]
        if odd:
            self.problems.append(f"loops: {listed(odd)} not whole numbers")
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
            self.problems.append(f"loops: counters {listed(outside)} negative or beyond 64 bits")
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
            if not same_kind(saved, live):
                self.problems.append(f"{where}: a {type(saved).__name__}, the live state a {type(live).__name__}")
            return
        missing = [str(k) for k in live if k not in saved]
        if missing and top:
            self.problems.append(f"{where}: missing {listed(missing)}")
        for key in (k for k in live if k in saved):
            self.like(f"{where}.{key}", saved[key], live[key], top=False)
        if not top and live:  # data keyed by the run: new keys' values must be of the kind the live ones share
            sample = next(iter(live.values()))
            if all(same_kind(v, sample) for v in live.values()):
                odd = [str(k) for k, v in saved.items() if k not in live and not same_kind(v, sample)]
                if odd:
                    self.problems.append(f"{where}: {listed(odd)} of another type than the live entries "
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
                self.problems.append(f"{where}: {listed(shadowing)} would replace the scheduler's own attributes")
            # A NaN counter or rate (last_epoch, base_lrs) would train on NaN learning rates from the first step.
            nan = [str(k) for k, v in saved.items() if k in live and finite(live[k]) and not finite(v)]
            if nan:
                self.problems.append(f"{where}: {listed(nan)} not finite")
            self._per_group(where, saved, live, len(getattr(getattr(scheduler, "optimizer", None), "param_groups", ())))

    def _per_group(self, where: str, saved: dict[Any, Any], live: dict[str, Any], groups: int) -> None:
        """Lists with one value per parameter group (base_lrs, _last_lr, lr_lambdas) must keep their length: torch
        zips them with the groups, so a longer or shorter list trains some groups at another rate without a word."""
        for key, value in live.items():
            theirs = saved.get(key)
            if groups and isinstance(value, list) and len(value) == groups and isinstance(theirs, (list, tuple)) \
                    and len(theirs) != groups:
                self.problems.append(f"{where}.{key}: {len(theirs)} values, one per parameter group of an optimizer "
                                     f"with {groups}")

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

    def sampler(self, state: Any, generator: torch.Generator | None = None) -> None:
        """The resumable sampler's state: an epoch number, a seed and, when the seeds were drawn from the user's
        generator, that generator's state (``generator``: the run's own, which it will be loaded into)."""
        if state is None:
            return
        ok = isinstance(state, dict) and set(state) - {"generator_state"} == {"epoch", "epoch_seed"} and all(
            (isinstance(v, int) and not isinstance(v, bool) and 0 <= v < _INT64) or (k == "epoch_seed" and v is None)
            for k, v in state.items() if k != "generator_state")
        if not ok:
            self.problems.append(f"sampler: {str(state)[:100]} is not {{'epoch': int, 'epoch_seed': int}} with "
                                 f"both in [0, 2**63)")
        elif "generator_state" in state:
            self._generator_state(state["generator_state"], generator)

    def _generator_state(self, saved: Any, generator: torch.Generator | None) -> None:
        """A saved ``Generator.get_state()``: a uint8 vector the generator (or a CPU one) takes, tried on a scratch
        generator so that a wrong one is refused here rather than half-way through the restore."""
        scratch = torch.Generator(device=generator.device if generator is not None else "cpu")
        size = scratch.get_state().numel()
        if not isinstance(saved, torch.Tensor) or saved.dtype != torch.uint8 or saved.dim() != 1 \
                or saved.numel() != size or saved.layout != torch.strided or saved.is_meta:
            kind = f"a {saved.dtype} tensor of shape {tuple(saved.shape)}" if isinstance(saved, torch.Tensor) else \
                f"a {type(saved).__name__}"
            self.problems.append(f"sampler.generator_state: {kind}, not the {size} bytes (torch.uint8) of a "
                                 f"{scratch.device.type} generator's state")
            return
        try:
            scratch.set_state(saved)
        except Exception as err:  # noqa: BLE001 - whatever the generator rejects is one problem
            self.problems.append(f"sampler.generator_state: {type(err).__name__}: {str(err)[:200]}")

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
        shown = "\n  ".join(self.problems[:SHOWN])
        more = f"\n  ... and {len(self.problems) - SHOWN} more" if len(self.problems) > SHOWN else ""
        fixes = " ".join(self.fixes)
        raise CheckpointError(f"checkpoint {self.path!r} does not fit {self.target}; nothing was loaded:\n  {shown}{more}"
                              f"\nFix: {fixes or 'build the model and optimizers as they were when it was saved.'}")


def _layout(tensor: torch.Tensor) -> str:
    return "quantized" if tensor.is_quantized else "dense" if tensor.layout == torch.strided else str(tensor.layout)
