"""What the tuners share: a short, separate training run on the user's hardware, and putting the module back."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from xtrain.core.callbacks.callback import Callback
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["preserved", "trial_fit"]


@contextmanager
def preserved(module: TrainModule) -> Iterator[None]:
    """Restore every parameter and buffer of ``module`` (values, dtype, device, ``requires_grad``), its training flag
    and its Trainer when the block ends. Parameters stay the same objects, so optimizers built on them stay valid."""
    tensors = [(t, t.data.clone(), t.requires_grad) for t in [*module.parameters(), *module.buffers()]]
    modes = [(m, m.training) for m in module.modules()]
    trainer = module._trainer
    try:
        yield
    finally:
        with torch.no_grad():
            for tensor, saved, requires_grad in tensors:
                tensor.data = saved
                tensor.grad = None
                tensor.requires_grad_(requires_grad)
        for m, training in modes:
            m.training = training
        module._trainer = trainer


def trial_fit(trainer: Trainer, module: TrainModule, callbacks: list[Callback], *, max_steps: int,
              train_dataloaders: Any = None, datamodule: Any = None) -> Trainer:
    """Fit ``module`` for at most ``max_steps`` on one device of ``trainer``'s accelerator, in its precision, with
    nothing written (no loggers, checkpoints or progress bars) and no validation; returns the run's Trainer."""
    from xtrain.core.trainer import Trainer

    strategy = trainer.strategy
    index = strategy.root_device.index
    with tempfile.TemporaryDirectory(prefix="xtrain-tune-") as root:
        run = Trainer(accelerator=strategy.accelerator, devices=[index] if index is not None else 1,
                      precision=strategy.precision.name, max_steps=max_steps, max_epochs=-1, callbacks=callbacks,
                      logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      limit_val_batches=0, num_sanity_val_steps=0, default_root_dir=root,
                      accumulate_grad_batches=trainer.accumulate_grad_batches,
                      gradient_clip_val=trainer.gradient_clip_val, gradient_clip_algorithm=trainer.gradient_clip_algorithm)
        run.fit(module, train_dataloaders, datamodule=datamodule)
    return run
