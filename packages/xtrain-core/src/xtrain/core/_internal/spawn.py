"""Bringing a spawned run's state back into the calling process.

Spawn and fork launchers run ``fit`` in worker processes; the calling process only waits. Rank 0 returns a full
checkpoint of the finished run (weights, optimizer and scheduler state, loop progress, callback states) plus the
metrics, and the caller loads it into its own module and optimizers. A second ``fit`` on the same Trainer therefore
continues from there, as it does under every other strategy (Lightning refuses it, #18775).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xtrain.core._internal.checkpointing import build_checkpoint
from xtrain.core._internal.optim import parse_optimizers
from xtrain.core._internal.state_dict import load_optimizer_state

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

__all__ = ["receive_worker_result", "worker_result"]


def worker_result(trainer: Trainer, output: Any) -> dict[str, Any] | None:
    """In a worker: the state to send back (rank 0 only; every rank must call this)."""
    checkpoint = build_checkpoint(trainer) if trainer.state == "fit" else None
    if not trainer.is_global_zero:
        return None
    return {"output": output, "checkpoint": checkpoint, "logger_versions": [lg.version for lg in trainer.loggers],
            "callback_metrics": {k: v.detach().cpu() for k, v in trainer.callback_metrics.items()},
            "logged_metrics": trainer._metrics.logged(), "progress_bar_metrics": trainer.progress_bar_metrics}


def receive_worker_result(trainer: Trainer, result: dict[str, Any]) -> Any:
    """In the caller: load the workers' final state into this process's Trainer and module."""
    trainer._metrics.new_results()  # the stage's own results, as in one process
    trainer._metrics.callback_metrics.update(result["callback_metrics"])
    trainer._metrics.logged_metrics.update(result["logged_metrics"])
    trainer._metrics.show_in_progress_bar(result["progress_bar_metrics"])
    # The workers chose the version directory; later runs of this Trainer (and log_dir) must use the same one.
    for logger, version in zip(trainer.loggers, result.get("logger_versions", []), strict=False):
        logger._version = version
    checkpoint = result.get("checkpoint")
    if checkpoint is None:
        return result["output"]
    module = trainer.module
    module.load_state_dict(checkpoint["state_dict"])
    if trainer._optimizer_module is not module:
        trainer.optimizers, trainer.lr_scheduler_configs = parse_optimizers(module.configure_optimizers())
        trainer._optimizer_module = module
    for opt, state in zip(trainer.optimizers, checkpoint["optimizer_states"], strict=True):
        load_optimizer_state(module, opt, state)
    for config, state in zip(trainer.lr_scheduler_configs, checkpoint["lr_schedulers"], strict=True):
        config.scheduler.load_state_dict(state)
    trainer.strategy.precision.load_state_dict(checkpoint["precision"])
    trainer._progress.load_state_dict(checkpoint["loops"])
    for cb in trainer.callbacks:
        if cb.state_key in checkpoint["callbacks"]:
            cb.load_state_dict(checkpoint["callbacks"][cb.state_key])
    return result["output"]
