"""Which step method each stage runs, and what happens when the module does not define it (as Lightning).

``validate``/``test`` without their step would run every batch through nothing and return ``[{}]``, and ``predict``
without ``predict_step`` or ``forward`` would fail inside the loop with torch's error: all three are refused before
anything starts. ``fit`` with validation data but no ``validation_step`` warns and skips the validation loop (it
would load every validation batch for nothing, the sanity check included).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from xtrain.core._internal.hooks import overrides
from xtrain.core.errors import ConfigError
from xtrain.core.module import TrainModule

__all__ = ["check_stage_step", "validation_loaders"]

_STEPS = {"validate": "validation_step", "test": "test_step"}


def check_stage_step(module: TrainModule, stage: str) -> None:
    """Raise :class:`ConfigError` when ``module`` has nothing for ``stage`` to run."""
    cls = type(module).__name__
    step = _STEPS.get(stage)
    if step is not None and not overrides(module, TrainModule, step):
        raise ConfigError(step, None, f"trainer.{stage}() runs {cls}.{step}, which {cls} does not define.",
                          fix=f"define {step}(self, batch, batch_idx) in {cls} (log metrics there with self.log).")
    if stage == "predict" and not overrides(module, TrainModule, "predict_step") and \
            type(module).forward is torch.nn.Module.forward:
        raise ConfigError("predict_step", None, f"trainer.predict() runs predict_step, whose default calls "
                          f"forward(), and {cls} defines neither.",
                          fix=f"define forward(self, x) or predict_step(self, batch, batch_idx) in {cls}.")


def validation_loaders(module: TrainModule, loaders: list[Any]) -> list[Any]:
    """The validation loaders ``fit`` runs: none, with a warning, when ``module`` has no ``validation_step``."""
    if loaders and not overrides(module, TrainModule, "validation_step"):
        warnings.warn(f"validation data was given but {type(module).__name__} defines no validation_step, so fit "
                      f"skips validation. Define validation_step(self, batch, batch_idx), or drop the validation "
                      f"data.", UserWarning, stacklevel=4)
        return []
    return loaders
