"""Validation, test and the sanity check: forward passes over evaluation dataloaders, metrics at the end."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal

import torch

from xtrain.core._internal.hook_overrides import batch_preparer, enter_eval, leave_eval
from xtrain.core._internal.progress_signal import PROGRESS
from xtrain.core._internal.step_signature import step_args

if TYPE_CHECKING:
    from xtrain.core.strategy import Strategy
    from xtrain.core.trainer import Trainer

__all__ = ["prepare_batch", "results_per_dataloader", "run_evaluation", "run_predict"]

EvalStage = Literal["validate", "test", "sanity_check"]
_PREFIX = {"validate": "validation", "sanity_check": "validation", "test": "test"}


def prepare_batch(strategy: Strategy, batch: Any) -> Any:
    """Move a batch to the strategy's device and convert it for its precision (every loop does this)."""
    batch = strategy.batch_to_device(batch)
    precision = strategy.precision
    return precision.convert_input(batch) if precision.converts_input else batch


def _no_grad(trainer: Trainer) -> AbstractContextManager[Any]:
    """``torch.inference_mode`` where allowed, except for validation inside ``fit`` (the sanity check too), which runs
    under ``torch.no_grad`` as Lightning's: a value computed there and kept on the module (a running statistic) may
    then be used by ``training_step`` in a backward pass, which an inference tensor cannot be."""
    strategy = trainer.strategy
    if (trainer.inference_mode and trainer.state != "fit" and strategy.accelerator.supports_inference_mode
            and strategy.supports_inference_mode):
        return torch.inference_mode()
    return torch.no_grad()


def run_evaluation(trainer: Trainer, stage: EvalStage, loaders: list[Any], limits: list[float]) -> dict[str, float]:
    """Run ``validation_step``/``test_step`` over ``loaders``; returns the epoch metrics sent to the loggers."""
    prefix = _PREFIX[stage]
    module = trainer.module
    trainer._metrics.begin(stage)  # trainer.validating/testing hold in on_<stage>_model_eval already
    with _no_grad(trainer):  # the stage's every hook too, as Lightning's (a forward in on_validation_epoch_end)
        modes = enter_eval(module, prefix)
        results = _evaluate(trainer, stage, prefix, loaders, limits)
        leave_eval(module, prefix, modes)
    trainer._metrics.switch("train")
    return results


def _evaluate(trainer: Trainer, stage: EvalStage, prefix: str, loaders: list[Any],
              limits: list[float]) -> dict[str, float]:
    step_name = "test_step" if stage == "test" else "validation_step"
    strategy = trainer.strategy
    hooks = trainer._hooks
    prepare = batch_preparer(trainer)
    PROGRESS.begin(stage)
    make_args = step_args(getattr(trainer.module, step_name), several_loaders=len(loaders) > 1)
    hooks.call(f"on_{prefix}_start")
    hooks.call(f"on_{prefix}_epoch_start")
    on_start = hooks.get(f"on_{prefix}_batch_start")
    on_end = hooks.get(f"on_{prefix}_batch_end")
    for dl_idx, (loader, limit) in enumerate(zip(loaders, limits, strict=True)):
        trainer._metrics.dataloader_suffix = f"/dataloader_idx_{dl_idx}" if len(loaders) > 1 else ""
        for batch_idx, batch in enumerate(loader):
            if batch_idx >= limit:
                break
            batch = prepare(batch, dl_idx)
            trainer._metrics.batch = batch
            for fn in on_start:
                fn(batch, batch_idx, dl_idx)
            output = strategy.run_step(step_name, *make_args(batch, batch_idx, dl_idx))  # type: ignore[arg-type]
            PROGRESS.step(stage)
            for fn in on_end:
                fn(output, batch, batch_idx, dl_idx)
            step_values, log_step = trainer._metrics.eval_batch_done(dl_idx)
            if step_values and trainer.is_global_zero:
                for logger in trainer.loggers:
                    logger.log_metrics(step_values, log_step)
    trainer._metrics.dataloader_suffix = ""
    values = trainer._metrics.end_epoch()
    with trainer._metrics.epoch_end_logging():
        hooks.call(f"on_{prefix}_epoch_end")
    results = trainer._epoch_end_logs(values, log=stage != "sanity_check")
    hooks.call(f"on_{prefix}_end")
    return results


def results_per_dataloader(results: dict[str, float], count: int,
                           origins: dict[str, set[str]] | None = None) -> list[dict[str, float]]:
    """``validate``/``test``'s return value, as Lightning's: one dict per dataloader, each with that dataloader's
    ``.../dataloader_idx_<i>`` values and the values logged for all of them (in epoch-end hooks, say). ``origins``:
    the dataloader suffixes of keys logged without one (``add_dataloader_idx=False``), which go to those only."""
    if count <= 1:
        return [results]
    origins = origins or {}

    def belongs(key: str, suffix: str) -> bool:
        if "/dataloader_idx_" in key:
            return key.endswith(suffix)
        return key not in origins or suffix in origins[key]

    return [{k: v for k, v in results.items() if belongs(k, f"/dataloader_idx_{i}")} for i in range(count)]


def run_predict(trainer: Trainer, loaders: list[Any], limits: list[float], *, keep: bool = True) -> list[list[Any]]:
    """Run ``predict_step`` over ``loaders``; returns this rank's predictions per dataloader (empty lists when not
    ``keep``: a prediction writer has them, and a large run would not fit in memory)."""
    module = trainer.module
    strategy = trainer.strategy
    hooks = trainer._hooks
    outputs: list[list[Any]] = []
    with _no_grad(trainer):
        modes = enter_eval(module, "predict")
        prepare = batch_preparer(trainer)
        PROGRESS.begin("predict")
        make_args = step_args(module.predict_step, several_loaders=len(loaders) > 1)
        hooks.call("on_predict_start")
        hooks.call("on_predict_epoch_start")
        for dl_idx, (loader, limit) in enumerate(zip(loaders, limits, strict=True)):
            found: list[Any] = []
            for batch_idx, batch in enumerate(loader):
                if batch_idx >= limit:
                    break
                batch = prepare(batch, dl_idx)
                hooks.call("on_predict_batch_start", batch, batch_idx, dl_idx)
                prediction = strategy.run_step("predict_step", *make_args(batch, batch_idx, dl_idx))
                PROGRESS.step("predict")
                hooks.call("on_predict_batch_end", prediction, batch, batch_idx, dl_idx)
                if keep:
                    found.append(prediction)
            outputs.append(found)
        hooks.call("on_predict_epoch_end")
        hooks.call("on_predict_end")
        leave_eval(module, "predict", modes)
    return outputs
