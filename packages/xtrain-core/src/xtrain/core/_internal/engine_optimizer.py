"""The Engine's ``optimizer.step()``: through the strategy and its precision plugin, as the Trainer's step.

A loop written for the Engine calls ``optimizer.step()`` itself, so a precision plugin that owns the step
(``16-mixed``: unscale the gradients, skip a step whose gradients hold inf/NaN, update the scale) would never run, and
the scaled gradients would reach the weights. :func:`prepare_steps` replaces ``step`` on the optimizer instance with
one that calls ``Strategy.optimizer_step``; the plugin's own ``optimizer.step()`` inside it reaches the step that was
there before. The optimizer stays the user's object, so ``isinstance``, ``state_dict``, ``param_groups`` and
learning-rate schedulers built on it before or after setup keep working. The new step is a bound method, because a
torch scheduler created later wraps ``optimizer.step.__func__``.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from xtrain.core._internal.nonfinite import NonFiniteCheck, skippable_step
from xtrain.core.precision import Precision
from xtrain.core.strategy import Strategy

__all__ = ["prepare_steps", "route_step", "routes_steps"]


def routes_steps(strategy: Strategy) -> bool:
    """Whether ``strategy`` or its precision plugin overrides ``optimizer_step``.

    The base classes' ``optimizer_step`` only calls ``optimizer.step()``; leaving the step alone then keeps the
    Engine's step exactly as cheap as raw PyTorch's (``32-true``, ``bf16-mixed``).
    """
    return (type(strategy.precision).optimizer_step is not Precision.optimizer_step
            or type(strategy).optimizer_step is not Strategy.optimizer_step)


def prepare_steps(optimizers: Sequence[torch.optim.Optimizer], strategy: Strategy, check: NonFiniteCheck) -> None:
    """Give each set-up optimizer the Engine's step and Accelerate's ``step_was_skipped`` flag.

    The ``"skip"`` guard goes outside the routed step: a skipped batch reaches neither the optimizer nor the
    precision plugin, so a gradient scaler neither steps nor counts it towards growing its scale (whatever the
    gradients hold: stale ones under ``zero_grad(set_to_none=False)``); ``Engine.clip_gradients`` does not unscale
    on such a step either, so the scaler has no per-step state left to settle.
    """
    routed = routes_steps(strategy)
    for optimizer in optimizers:
        optimizer.step_was_skipped = False  # type: ignore[attr-defined]
        if routed:
            route_step(optimizer, strategy)
        if check.mode == "skip":
            skippable_step(optimizer, check)


def route_step(optimizer: torch.optim.Optimizer, strategy: Strategy) -> None:
    """Make ``optimizer.step()`` (or ``step(closure)``) call ``strategy.optimizer_step``; done once per optimizer.

    ``optimizer.step_was_skipped`` is then ``True`` after a step the plugin skipped (inf/NaN gradients), and the step
    returns what the optimizer's own step returned (a closure optimizer's loss), ``None`` when it did not run.
    """
    step: Callable[..., Any] = optimizer.step
    if getattr(step, "_xtrain_routed", False):
        return
    inside = False
    result: Any = None

    @functools.wraps(step)
    def routed(self: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        nonlocal inside, result
        if inside:  # the plugin's own optimizer.step() call: the step that was there before
            result = step() if closure is None else step(closure)
            return result
        inside, result = True, None
        self.step_was_skipped = False  # type: ignore[attr-defined]
        try:
            stepped = (strategy.optimizer_step(self) if closure is None
                       else strategy.optimizer_step(self, closure=closure))
        finally:
            inside = False
        if not stepped:
            self.step_was_skipped = True  # type: ignore[attr-defined]
        return result

    routed._xtrain_routed = True  # type: ignore[attr-defined]
    optimizer.step = types.MethodType(routed, optimizer)  # type: ignore[method-assign]
