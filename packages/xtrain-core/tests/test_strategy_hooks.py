"""The contract hooks the Horovod and model-averaging strategies rely on, checked with a one-process strategy.

``set_gradient_accumulation`` (the window reaches a strategy that accumulates itself), ``join`` (called after each
epoch's batches; a returned rank's progress is adopted) and LR schedulers following optimizers that
``setup_optimizers`` replaced with new objects.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar, TypeVar

import torch
from typing_extensions import override

from xtrain.core import Trainer
from xtrain.core.defaults import SingleDeviceStrategy
from xtrain.core.testing import TinyClassifier, tiny_loaders

_T = TypeVar("_T")


class ReplacingStrategy(SingleDeviceStrategy):
    """Like Horovod: returns new optimizer objects and accumulates gradients itself."""

    name: ClassVar[str] = "replacing"
    handles_gradient_accumulation: ClassVar[bool] = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.events: list[str] = []
        self.joins = 0
        self.adopt: tuple[int, int] | None = None

    @override
    def set_gradient_accumulation(self, batches: int) -> None:
        self.events.append(f"accumulate={batches}")

    @override
    def setup_optimizers(self, optimizers: list[torch.optim.Optimizer]) -> list[torch.optim.Optimizer]:
        self.events.append("setup_optimizers")
        return [type(o)(o.param_groups) for o in optimizers]  # new objects sharing the param groups

    @override
    def join(self) -> int | None:
        self.joins += 1
        return 0 if self.adopt is not None else None

    @override
    def broadcast(self, obj: _T, src: int = 0) -> _T:
        if self.adopt is not None and isinstance(obj, tuple):
            return self.adopt  # type: ignore[return-value]  # what rank 0 would have sent
        return obj


class Scheduled(TinyClassifier):
    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.4)
        schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def _trainer(strategy: ReplacingStrategy, **kwargs: Any) -> Trainer:
    return Trainer(strategy=strategy, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0, **kwargs)


def test_accumulation_window_reaches_the_strategy_before_its_optimizers() -> None:
    strategy = ReplacingStrategy()
    trainer = _trainer(strategy, max_steps=2, accumulate_grad_batches=3)
    trainer.fit(TinyClassifier(), tiny_loaders()[0])
    assert strategy.events == ["accumulate=3", "setup_optimizers"]
    trainer.accumulate_grad_batches = 2
    trainer.max_steps = 3
    trainer.fit(trainer.module, tiny_loaders()[0])  # configure_optimizers again, as Lightning at every fit
    assert strategy.events == ["accumulate=3", "setup_optimizers", "accumulate=2", "setup_optimizers"]


def test_schedulers_follow_replaced_optimizers_without_false_warnings() -> None:
    strategy = ReplacingStrategy()
    trainer = _trainer(strategy, max_steps=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns if it thinks the scheduler stepped before the optimizer
        trainer.fit(Scheduled(), tiny_loaders()[0])
    (config,) = trainer.lr_scheduler_configs
    assert config.scheduler.optimizer is trainer.optimizers[0]
    assert trainer.optimizers[0].param_groups[0]["lr"] == 0.4 * 0.5**3


def test_join_is_called_after_every_epoch_and_a_returned_rank_s_progress_is_adopted() -> None:
    strategy = ReplacingStrategy()
    train = tiny_loaders(n=64, batch_size=16)[0]  # 4 batches per epoch
    trainer = _trainer(strategy, max_epochs=2)
    trainer.fit(TinyClassifier(), train)
    assert strategy.joins == 2 and trainer.global_step == 8
    strategy.adopt = (20, 21)  # another rank trained longer: every rank continues from its counts
    trainer.max_epochs = 3
    trainer.fit(trainer.module, train)
    assert strategy.joins == 3 and trainer.global_step == 20 and trainer._progress.total_batches == 21


def test_a_plugin_read_before_the_strategy_has_it_is_a_config_error_naming_it() -> None:
    import pytest

    from xtrain.core.errors import ConfigError

    strategy = SingleDeviceStrategy()
    for name, words in [("accelerator", "accelerator"), ("precision", "precision"), ("checkpoint_io", "checkpoint_io"),
                        ("module", "module (call setup first)"), ("model", "model (call setup first)")]:
        with pytest.raises(ConfigError, match=r"has no " + words.replace("(", r"\(").replace(")", r"\)")
                           + r" yet.*strategy\.connect"):
            getattr(strategy, name)
