"""What ``TrainModule.optimizers()`` hands to manual optimization: optimizers whose ``step`` goes through the
strategy, so gradient scaling (16-mixed), unscaling and skipped steps work as in automatic optimization."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from xtrain.core.strategy import Strategy

__all__ = ["StrategyOptimizer", "requires_closure"]


def requires_closure(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer.step`` cannot run without a closure (``torch.optim.LBFGS`` re-evaluates the loss).

    Such an optimizer gets the closure itself; every other one is stepped after the closure ran, so a gradient
    scaler can unscale and check the gradients in between.
    """
    cls = type(optimizer)
    required = _CLOSURE_REQUIRED.get(cls)
    if required is None:
        try:
            parameter = inspect.signature(cls.step).parameters.get("closure")
        except (TypeError, ValueError):
            parameter = None
        required = _CLOSURE_REQUIRED[cls] = parameter is not None and parameter.default is inspect.Parameter.empty
    return required


_CLOSURE_REQUIRED: dict[type, bool] = {}


class StrategyOptimizer:
    """Wraps a ``torch.optim.Optimizer``; everything but ``step`` goes to the optimizer itself.

    Attributes:
        optimizer: The wrapped optimizer.
        steps: How many times ``step`` was called (manual optimization's ``global_step`` counts them).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, strategy: Strategy, *,
                 on_step: Callable[[], None] | None = None,
                 before_step: Callable[[torch.optim.Optimizer], bool] | None = None,
                 toggled: Callable[[Any], AbstractContextManager[Any]] | None = None) -> None:
        self.optimizer = optimizer
        self._strategy = strategy
        self._toggled = toggled
        self._on_step = on_step
        self._before_step = before_step
        self._closure_required = requires_closure(optimizer)
        self.steps = 0

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Step through the strategy (and its precision).

        Returns the closure's loss when a closure is given (what ``torch.optim.Optimizer.step`` returns); without
        one, ``False`` when the step was skipped (non-finite gradients under a gradient scaler), else ``True``.
        ``before_step`` (the ``on_before_optimizer_step`` hooks, clipping) runs after the closure, as Lightning's
        precision plugin runs it; when it returns ``False`` the step is dropped.
        """
        loss: Any = None
        if closure is not None and self._closure_required:
            # The optimizer evaluates the loss itself, maybe several times (LBFGS): the pre-step work follows each.
            losses: list[Any] = []

            def evaluate() -> Any:
                with torch.enable_grad():
                    value = closure()
                losses.append(value)
                if self._before_step is not None:
                    self._before_step(self.optimizer)
                return value

            stepped = self._strategy.optimizer_step(self.optimizer, closure=evaluate)
            loss = losses[0] if losses else None
        else:
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()
            if self._before_step is not None and not self._before_step(self.optimizer):
                return loss if closure is not None else False
            stepped = self._strategy.optimizer_step(self.optimizer)
        self.steps += 1
        if self._on_step is not None:
            self._on_step()
        return loss if closure is not None else stepped

    @contextmanager
    def toggle_model(self, sync_grad: bool = True) -> Iterator[None]:
        """Lightning's ``LightningOptimizer.toggle_model``: only this optimizer's parameters get gradients inside the
        block (``TrainModule.toggle_optimizer``), and ``sync_grad=False`` skips the gradient synchronization of
        distributed strategies (an accumulation step of manual optimization)."""
        if self._toggled is None:
            from xtrain.core.errors import ConfigError

            raise ConfigError("toggle_model", self, "needs the optimizer from TrainModule.optimizers().",
                              fix="call self.optimizers() in training_step and toggle what it returns.")
        with self._strategy.no_backward_sync(not sync_grad), self._toggled(self):
            yield

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["optimizer"], name)

    def __repr__(self) -> str:
        return f"StrategyOptimizer({self.optimizer!r})"
