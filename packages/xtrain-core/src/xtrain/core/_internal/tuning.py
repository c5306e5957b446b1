"""What the tuners share: short trial runs on a fresh Trainer on the user's hardware, putting the module back, and
leaving the global random state untouched."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import torch

from xtrain.core._internal.rng import collect_rng_states, restore_rng_states

if TYPE_CHECKING:
    from xtrain.core.callbacks.callback import Callback
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["METHODS", "Method", "dataset_length", "isolated_rng", "preserved", "run_trial"]

Method = Literal["fit", "validate", "test", "predict"]
METHODS: tuple[Method, ...] = ("fit", "validate", "test", "predict")


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



@contextmanager
def isolated_rng(trainer: Trainer) -> Iterator[None]:
    """Put the global random generators back as they were when the block ends, even when it raises.

    Why: a seeded script that tunes and then fits must train exactly as without tuning (shuffling, dropout and
    module initialisation after tuning draw the same numbers), as Lightning's learning-rate finder guarantees. The
    generators are torch's CPU one, python's ``random``, numpy's global one when numpy is already imported (an
    import during the block seeds it afresh, so there is nothing to restore), and every CUDA device's when CUDA is
    initialised or about to be (the trials run on a CUDA device).
    """
    states = collect_rng_states(cuda=trainer.strategy.root_device.type == "cuda")
    try:
        yield
    finally:
        restore_rng_states(states)


def run_trial(trainer: Trainer, module: TrainModule, callbacks: list[Callback], *, method: Method, steps: int,
              max_epochs: int, limit_train_batches: int | float, train_dataloaders: Any = None,
              dataloaders: Any = None, datamodule: Any = None) -> Trainer:
    """Run ``method`` on ``module`` for at most ``steps`` optimizer steps (fit) or batches (the other stages), on
    one device of ``trainer``'s accelerator, in its precision, with its accumulation and clipping; returns the
    trial's Trainer.

    Why a fresh Trainer: the user's Trainer must come out untouched (no loggers written, no checkpoints, no
    callbacks called, no state left), and the trial must still train as the real run will. ``max_epochs`` and
    ``limit_train_batches`` are passed by the caller, because the learning-rate finder keeps the user's limits (as
    Lightning's does) while the batch-size finder uses the whole epoch. Validation never runs during a fit trial.
    """
    from xtrain.core.trainer import Trainer

    strategy = trainer.strategy
    index = strategy.root_device.index
    with tempfile.TemporaryDirectory(prefix="xtrain-tune-") as root:
        run = Trainer(accelerator=strategy.accelerator, devices=[index] if index is not None else 1,
                      precision=strategy.precision.name, max_steps=steps if method == "fit" else -1,
                      max_epochs=max_epochs, limit_train_batches=limit_train_batches, callbacks=callbacks,
                      logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      limit_val_batches=0 if method == "fit" else steps, limit_test_batches=steps,
                      limit_predict_batches=steps, num_sanity_val_steps=0, default_root_dir=root,
                      accumulate_grad_batches=trainer.accumulate_grad_batches,
                      gradient_clip_val=trainer.gradient_clip_val,
                      gradient_clip_algorithm=trainer.gradient_clip_algorithm)
        if method == "fit":
            run.fit(module, train_dataloaders, datamodule=datamodule)
        elif method == "validate":
            run.validate(module, dataloaders, verbose=False, datamodule=datamodule)
        elif method == "test":
            run.test(module, dataloaders, verbose=False, datamodule=datamodule)
        else:
            run.predict(module, dataloaders, datamodule=datamodule, return_predictions=False)
    return run


def dataset_length(run: Trainer, method: Method) -> int | None:
    """The number of samples the trial's loader of ``method`` draws from, or ``None`` when unknown (an iterable
    dataset). Why: once one batch holds the whole dataset, a larger size tests nothing new."""
    loaders: Any = {"fit": run.train_dataloader, "validate": run.val_dataloaders, "test": run.test_dataloaders,
                    "predict": run.predict_dataloaders}[method]
    if isinstance(loaders, (list, tuple)):
        loaders = loaders[0] if len(loaders) == 1 else None
    try:
        return len(loaders.dataset)
    except (AttributeError, TypeError, NotImplementedError):
        return None
