"""What ``TrainModule.optimizers()`` hands to manual optimization: optimizers whose ``step`` goes through the
strategy, so gradient scaling (16-mixed), unscaling and skipped steps work as in automatic optimization."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from xtrain.core.strategy import Strategy

__all__ = ["StrategyOptimizer"]


class StrategyOptimizer:
    """Wraps a ``torch.optim.Optimizer``; everything but ``step`` goes to the optimizer itself.

    Attributes:
        optimizer: The wrapped optimizer.
        steps: How many times ``step`` was called (manual optimization's ``global_step`` counts them).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, strategy: Strategy, *,
                 on_step: Callable[[], None] | None = None) -> None:
        self.optimizer = optimizer
        self._strategy = strategy
        self._on_step = on_step
        self.steps = 0

    def step(self, closure: Callable[[], Any] | None = None) -> bool:
        """Step through the strategy (and its precision); returns ``False`` when the step was skipped."""
        if closure is not None:
            with torch.enable_grad():
                closure()
        self.steps += 1
        stepped = self._strategy.optimizer_step(self.optimizer)
        if self._on_step is not None:
            self._on_step()
        return stepped

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["optimizer"], name)

    def __repr__(self) -> str:
        return f"StrategyOptimizer({self.optimizer!r})"
