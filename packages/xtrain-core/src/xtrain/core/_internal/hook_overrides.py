"""The module hooks that replace one of the Trainer's own actions when a subclass overrides them.

Batch transfer, switching to eval/train mode around evaluation and stepping schedulers: each
is looked up once (per loop or per setup) and, when not overridden, the Trainer keeps its own fast path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xtrain.core._internal.hooks import overrides
from xtrain.core.datamodule import DataModule
from xtrain.core.module import TrainModule

if TYPE_CHECKING:
    from torch import nn

    from xtrain.core.trainer import Trainer

__all__ = ["batch_preparer", "enter_eval", "leave_eval", "module_overrides", "step_scheduler"]

_TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def module_overrides(module: TrainModule, name: str) -> bool:
    return overrides(module, TrainModule, name)


def _transfer_hook(trainer: Trainer, name: str) -> Callable[..., Any] | None:
    datamodule = trainer.datamodule
    if datamodule is not None and overrides(datamodule, DataModule, name):
        found: Callable[..., Any] = getattr(datamodule, name)
        return found
    return getattr(trainer.module, name) if module_overrides(trainer.module, name) else None


def batch_preparer(trainer: Trainer) -> Callable[[Any, int], Any]:
    """``prepare(batch, dataloader_idx)``: the strategy's move to the device, or the user's transfer hooks.

    A data module's hook wins over the module's (as a DataModule owns its batches' types).
    """
    from xtrain.core._internal.loops.evaluation import prepare_batch

    strategy = trainer.strategy
    before, transfer, after = (_transfer_hook(trainer, name) for name in _TRANSFER_HOOKS)
    if before is None and transfer is None and after is None:
        return lambda batch, dataloader_idx: prepare_batch(strategy, batch)
    precision = strategy.precision

    def prepare(batch: Any, dataloader_idx: int) -> Any:
        if before is not None:
            batch = before(batch, dataloader_idx)
        if transfer is not None:
            batch = transfer(batch, strategy.root_device, dataloader_idx)
            batch = precision.convert_input(batch) if precision.converts_input else batch
        else:
            batch = prepare_batch(strategy, batch)
        return after(batch, dataloader_idx) if after is not None else batch

    return prepare


def enter_eval(module: TrainModule, stage: str) -> dict[nn.Module, bool]:
    """Switch to eval mode for ``stage`` (``validation``, ``test``, ``predict``) via the module's hook if any; returns
    each submodule's mode before, for :func:`leave_eval`."""
    modes = {sub: sub.training for sub in module.modules()}
    hook = f"on_{stage}_model_eval"
    if module_overrides(module, hook):
        getattr(module, hook)()
    else:
        module.eval()
    return modes


def leave_eval(module: TrainModule, stage: str, modes: dict[nn.Module, bool]) -> None:
    """Back from ``stage``: the module's ``on_<stage>_model_train`` where it overrides it, else every submodule's mode
    from before (a frozen BatchNorm stays in eval; after ``predict`` too), as Lightning's."""
    hook = f"on_{stage}_model_train"
    if stage != "predict" and module_overrides(module, hook):
        getattr(module, hook)()
        return
    for sub, training in modes.items():
        sub.training = training


def step_scheduler(module: TrainModule, scheduler: Any, metric: float | None) -> None:
    """Step one scheduler: the module's ``lr_scheduler_step`` when overridden, else ``scheduler.step``."""
    if module_overrides(module, "lr_scheduler_step"):
        module.lr_scheduler_step(scheduler, metric)
    elif metric is None:
        scheduler.step()
    else:
        scheduler.step(metric)

