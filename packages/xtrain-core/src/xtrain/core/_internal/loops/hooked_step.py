"""The optimizer step of automatic optimization when the module overrides ``optimizer_step``,
``optimizer_zero_grad`` or ``configure_gradient_clipping``.

The user's ``optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)`` receives a closure that runs
``training_step`` and the backward pass, then the pre-step hooks and the clipping; the optimizer is stepped only when
the closure produced a loss. ``global_step`` counts the steps the override really took.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from typing_extensions import override

from xtrain.core._internal.hook_overrides import module_overrides
from xtrain.core._internal.optimizer import StrategyOptimizer

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

__all__ = ["STEP_HOOKS", "ClosureOptimizer", "hooked_optimizer_step"]

STEP_HOOKS = ("optimizer_step", "optimizer_zero_grad", "configure_gradient_clipping")

ForwardBackward = Callable[[Any, int, int], tuple[Any, "torch.Tensor | None"]]


class ClosureOptimizer(StrategyOptimizer):
    """A StrategyOptimizer that skips the step when its closure returned no loss (``training_step`` gave ``None``)."""

    @override
    def step(self, closure: Callable[[], Any] | None = None) -> bool:
        if closure is not None:
            with torch.enable_grad():
                if closure() is None:
                    return False
        self.steps += 1
        return self._strategy.optimizer_step(self.optimizer)


def hooked_optimizer_step(trainer: Trainer, forward_backward: ForwardBackward, batch: Any, batch_idx: int,
                          accumulate: int) -> tuple[Any, int]:
    """Run one stepping batch through the module's hooks; returns ``(training_step output, steps taken)``."""
    module = trainer.module
    optimizer = trainer.optimizers[0]
    wrapped = ClosureOptimizer(optimizer, trainer.strategy)
    result: dict[str, Any] = {}
    before_step = trainer._hooks.get("on_before_optimizer_step")
    custom_clip = module_overrides(module, "configure_gradient_clipping")

    def closure() -> torch.Tensor | None:
        output, loss = forward_backward(batch, batch_idx, accumulate)
        result["output"] = output
        if loss is None:
            return None
        for fn in before_step:
            fn(optimizer)
        if trainer.skip_optimizer_step:  # a callback dropped this step: the closure reports no loss, nothing steps
            trainer.skip_optimizer_step = False
            optimizer.zero_grad(set_to_none=True)
            return None
        if custom_clip:
            module.configure_gradient_clipping(wrapped, trainer.gradient_clip_val, trainer.gradient_clip_algorithm)
        elif trainer.gradient_clip_val:
            trainer.strategy.clip_gradients(optimizer, value=trainer.gradient_clip_val,
                                            algorithm=trainer.gradient_clip_algorithm)
        return loss

    if module_overrides(module, "optimizer_step"):
        module.optimizer_step(trainer.current_epoch, batch_idx, wrapped, closure)
    else:
        wrapped.step(closure)
    if "output" not in result:
        from xtrain.core.errors import ConfigError

        raise ConfigError("optimizer_step", type(module).__name__, "did not call the optimizer_closure, so "
                          "training_step never ran.", fix="call optimizer.step(closure=optimizer_closure), or "
                          "optimizer_closure() when you skip the step.")
    if wrapped.steps:
        for fn in trainer._hooks.get("on_before_zero_grad"):
            fn(optimizer)
        module.optimizer_zero_grad(trainer.current_epoch, batch_idx, wrapped)
    return result["output"], wrapped.steps
