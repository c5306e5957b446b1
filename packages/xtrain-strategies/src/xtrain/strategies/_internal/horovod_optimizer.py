"""The optimizers of a Horovod run: wrapping them in ``hvd.DistributedOptimizer`` and stepping them correctly.

Three details of Horovod's optimizer that a framework has to get right:

* ``synchronize()`` (wait for the averaged gradients) must run once per step, before anything reads the
  gradients (clipping, the gradient scaler's unscale); ``step()`` then runs inside ``skip_synchronize()``. A step the
  precision plugin skips (inf gradients) leaves Horovod thinking it is synchronized, so the flag is reset here.
* Its ``zero_grad()`` takes no ``set_to_none`` argument; the loops pass one.
* ``hvd.broadcast_optimizer_state`` initializes an empty state by stepping once with zero gradients, which moves
  the weights under weight decay and counts a step in Adam. Rank 0's ``state_dict`` is broadcast instead, exactly.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from xtrain.core._internal.progress_signal import PROGRESS
from xtrain.strategies._internal.horovod_wire import BFloat16AsFloat32

if TYPE_CHECKING:
    from xtrain.strategies.horovod import HorovodStrategy

__all__ = ["HorovodOptimizers"]


class HorovodOptimizers:
    """The Horovod-wrapped optimizers of one strategy, and how many optimizer steps this rank took."""

    def __init__(self, strategy: HorovodStrategy) -> None:
        self.strategy = strategy
        self.wrapped: list[torch.optim.Optimizer] = []
        self._names = 0  # optimizers wrapped so far: Horovod's tensor names must stay unique across fits
        self.steps = 0
        self._synchronized: set[int] = set()

    def wrap(self, optimizers: list[torch.optim.Optimizer]) -> list[torch.optim.Optimizer]:
        s = self.strategy
        hvd = s.hvd
        names = {id(p): n for n, p in s.module.named_parameters()} if s._module is not None else {}
        for retired in self.wrapped:  # a later fit's new optimizers (every fit configures its own)
            _mute(retired)
        self.wrapped = []
        result = []
        for optimizer in optimizers:
            index = self._names
            self._names += 1
            params = [p for group in optimizer.param_groups for p in group["params"]]
            named = [(f"opt{index}.{names.get(id(p), f'param{j}')}", p) for j, p in enumerate(params)]
            wrapped = hvd.DistributedOptimizer(
                optimizer, named_parameters=named,
                compression=hvd.Compression.fp16 if s.compression == "fp16" else BFloat16AsFloat32,
                backward_passes_per_step=s.passes_per_step, op=hvd.Average,
                gradient_predivide_factor=s.gradient_predivide_factor, groups=s.groups,
                sparse_as_dense=s.sparse_as_dense)
            wrapped.zero_grad = types.MethodType(_zero_grad, wrapped)
            wrapped.register_step_post_hook(self._count)
            if s.world_size > 1:
                with PROGRESS.collective("broadcast_object (rank 0's optimizer state)"):
                    state = hvd.broadcast_object(wrapped.state_dict(), root_rank=0,
                                                 name=f"xtrain.optimizer_state.{index}")
                if s.global_rank != 0:
                    wrapped.load_state_dict(state)
            self.wrapped.append(wrapped)
            result.append(wrapped)
        return result

    def _count(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.steps += 1

    def _ours(self, optimizer: torch.optim.Optimizer) -> bool:
        return any(optimizer is w for w in self.wrapped)

    def set_passes(self, passes: int) -> None:
        for optimizer in self.wrapped:
            optimizer.set_backward_passes_per_step(passes)  # type: ignore[attr-defined]

    def synchronize(self, optimizer: torch.optim.Optimizer) -> None:
        """Wait for this step's averaged gradients (once per step)."""
        if self._ours(optimizer) and id(optimizer) not in self._synchronized:
            # Not checked across ranks: under uneven inputs a joined rank serves these all-reduces from hvd.join.
            with PROGRESS.collective("allreduce of the gradients (DistributedOptimizer.synchronize)", checked=False):
                optimizer.synchronize()  # type: ignore[attr-defined]
            self._synchronized.add(id(optimizer))

    def step(self, optimizer: torch.optim.Optimizer, stepper: Callable[[torch.optim.Optimizer], bool]) -> bool:
        """Step through ``stepper`` (the precision plugin) with the gradients synchronized first."""
        if not self._ours(optimizer):
            return stepper(optimizer)
        self.synchronize(optimizer)
        try:
            with optimizer.skip_synchronize():  # type: ignore[attr-defined]
                return stepper(optimizer)
        finally:
            self._synchronized.discard(id(optimizer))
            optimizer._synchronized = False  # type: ignore[attr-defined]

    def adopt(self, *, root_rank: int, steps: int) -> None:
        """Take every optimizer's state (and the step count) from ``root_rank`` (after uneven inputs)."""
        s = self.strategy
        for index, optimizer in enumerate(self.wrapped):
            with PROGRESS.collective(f"broadcast_object (rank {root_rank}'s optimizer state after join)"):
                state = s.hvd.broadcast_object(optimizer.state_dict(), root_rank=root_rank,
                                               name=f"xtrain.optimizer_state.adopt.{index}.{s._joins}")
            if s.global_rank != root_rank:
                optimizer.load_state_dict(state)
        self.steps = steps


def _zero_grad(self: Any, set_to_none: bool = True) -> None:
    """Horovod's ``zero_grad`` check (no pending all-reduce), with torch's ``set_to_none`` argument."""
    if self._handles:
        raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before optimizer.step() "
                             "or optimizer.synchronize(); Horovod forbids it (the pending all-reduce would race).")
    super(type(self), self).zero_grad(set_to_none=set_to_none)


def _mute(optimizer: torch.optim.Optimizer) -> None:
    """Silence the gradient hooks of a Horovod ``DistributedOptimizer`` that a new one replaces.

    Horovod registers them on the parameters' gradient accumulators without handles, so they cannot be removed;
    left as they are, the old optimizer counts every backward pass of the new one and raises "Gradients were computed
    more than backward_passes_per_step times" at the next fit's first step. With an endless countdown the hook never
    all-reduces and never raises (it reads Horovod's ``_allreduce_delay``; nothing public does this).
    """
    delay = getattr(optimizer, "_allreduce_delay", None)
    if isinstance(delay, dict):
        for parameter in delay:
            delay[parameter] = math.inf
