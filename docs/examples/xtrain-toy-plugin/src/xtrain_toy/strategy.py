"""The toy strategy: one process, one toy device, and a count of the steps it ran."""

from __future__ import annotations

from typing import Any, ClassVar

from typing_extensions import override

from xtrain.core.defaults import SingleDeviceStrategy
from xtrain.core.strategy import StepName


class ToySingleStrategy(SingleDeviceStrategy):
    """Runs on one toy device; counts the training steps it routed to the module."""

    name: ClassVar[str] = "toy_single"
    supported_accelerators: ClassVar[frozenset[str] | None] = frozenset({"toy", "cpu"})

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.training_steps = 0

    @override
    def run_step(self, name: StepName, *args: Any, **kwargs: Any) -> Any:
        if name == "training_step":
            self.training_steps += 1
        return super().run_step(name, *args, **kwargs)
