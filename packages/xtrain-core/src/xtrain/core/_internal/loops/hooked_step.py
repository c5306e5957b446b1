"""The optimizer step of automatic optimization when the module overrides ``optimizer_step``,
``optimizer_zero_grad`` or ``configure_gradient_clipping``, or the optimizer needs a closure (LBFGS).

As in Lightning, the user's ``optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)`` receives a closure
that runs ``training_step``, the zeroing of the gradients (first batch of an accumulation window) and the backward
pass; ``optimizer.step(closure=...)`` runs it, then the pre-step hooks and the clipping, then steps. An override that
calls only ``optimizer_closure()`` skips the update (no pre-step hooks) but the step still counts in
``global_step``, as in Lightning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from xtrain.core._internal.hook_overrides import module_overrides
from xtrain.core._internal.optimizer import StrategyOptimizer

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

__all__ = ["STEP_HOOKS", "hooked_optimizer_step"]

STEP_HOOKS = ("optimizer_step", "optimizer_zero_grad", "configure_gradient_clipping")

ForwardBackward = Callable[[Any, int, int, "torch.optim.Optimizer | None"], tuple[Any, "torch.Tensor | None"]]
LossOf = Callable[[Any], "torch.Tensor | None"]


def hooked_optimizer_step(trainer: Trainer, forward_backward: ForwardBackward, loss_of: LossOf, batch: Any,
                          batch_idx: int, accumulate: int, zero: torch.optim.Optimizer | None) -> tuple[Any, bool]:
    """Run one stepping batch through the module's hooks; returns ``(training_step output, whether it counts)``.
    ``zero``: the optimizer whose gradients the closure zeroes (the window's first batch), else ``None``.

    A step counts unless it was dropped: a non-finite loss skipped by ``on_nonfinite_loss="skip"``, or a callback
    setting ``trainer.skip_optimizer_step``.
    """
    module = trainer.module
    optimizer = trainer.optimizers[0]
    result: dict[str, Any] = {}
    before_step = trainer._hooks.get("on_before_optimizer_step")
    custom_clip = module_overrides(module, "configure_gradient_clipping")

    def pre_step(raw: torch.optim.Optimizer) -> bool:
        if result.get("dropped"):
            return False
        for fn in before_step:
            fn(raw)
        if trainer.skip_optimizer_step:  # a callback dropped this step: nothing steps, nothing counts
            trainer.skip_optimizer_step = False
            result["dropped"] = True
            raw.zero_grad(set_to_none=True)
            return False
        if custom_clip:
            module.configure_gradient_clipping(wrapped, trainer.gradient_clip_val, trainer.gradient_clip_algorithm)
        elif trainer.gradient_clip_val:
            trainer.strategy.clip_gradients(raw, value=trainer.gradient_clip_val,
                                            algorithm=trainer.gradient_clip_algorithm)
        return True

    wrapped = StrategyOptimizer(optimizer, trainer.strategy, before_step=pre_step)

    def closure() -> torch.Tensor | None:
        output, loss = forward_backward(batch, batch_idx, accumulate, zero)
        result["output"] = output
        if loss is None:
            if loss_of(output) is not None:  # a non-finite loss that on_nonfinite_loss="skip" kept from backward
                result["dropped"] = True
            return None
        return loss.detach()

    if module_overrides(module, "optimizer_step"):
        module.optimizer_step(trainer.current_epoch, batch_idx, wrapped, closure)
    else:
        wrapped.step(closure)
    if "output" not in result:
        from xtrain.core.errors import ConfigError

        raise ConfigError("optimizer_step", type(module).__name__, "did not call the optimizer_closure, so "
                          "training_step never ran.", fix="call optimizer.step(closure=optimizer_closure), or "
                          "optimizer_closure() when you skip the step.")
    return result["output"], not result.get("dropped", False)
