"""Core's side of the precision contract: module init context, and logged values kept in at least float32."""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from typing import Any, ClassVar

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader
from typing_extensions import override

from xtrain.core import Precision, Trainer
from xtrain.core.defaults import SinglePrecision
from xtrain.core.testing import TinyClassifier, tiny_dataset


@contextmanager
def _default_dtype(dtype: torch.dtype) -> Any:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


class BFloat16Everywhere(Precision):
    """A test precision that runs the step with bfloat16 as the default dtype (what ``-true`` plugins do)."""

    name: ClassVar[str] = "test-bf16-default"
    param_dtype: ClassVar[torch.dtype | None] = torch.bfloat16

    @override
    def convert_module(self, module: nn.Module) -> nn.Module:
        return module.to(torch.bfloat16)

    @override
    def forward_context(self) -> AbstractContextManager[Any]:
        return _default_dtype(torch.bfloat16)

    @override
    def module_init_context(self) -> AbstractContextManager[Any]:
        return _default_dtype(torch.bfloat16)


def test_module_init_context_defaults_to_nothing() -> None:
    with SinglePrecision().module_init_context():
        assert torch.get_default_dtype() == torch.float32
    with Trainer(logger=False).init_module():
        assert nn.Linear(2, 2).weight.dtype == torch.float32


def test_trainer_init_module_goes_through_strategy_to_precision() -> None:
    trainer = Trainer(precision=BFloat16Everywhere(), logger=False)
    with trainer.init_module():
        layer = nn.Linear(2, 2)
    assert layer.weight.dtype == torch.bfloat16
    assert torch.get_default_dtype() == torch.float32


def test_half_precision_logged_values_accumulate_in_float32() -> None:
    """Summed in bfloat16, the mean of 64 batches of 1.296875 comes out as 1.3125; a logged Python number created
    while the default dtype is bfloat16 would become 0.0996."""

    class Logs(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("half", torch.tensor(1.3, dtype=torch.bfloat16), batch_size=16)
            self.log("number", 0.1, batch_size=16)

    trainer = Trainer(precision=BFloat16Everywhere(), logger=False, enable_progress_bar=False,
                      enable_model_summary=False)
    (metrics,) = trainer.validate(Logs(), DataLoader(tiny_dataset(1024), batch_size=16))
    assert metrics["half"] == pytest.approx(float(torch.tensor(1.3, dtype=torch.bfloat16)), abs=1e-6)
    assert metrics["number"] == pytest.approx(0.1, abs=1e-7)
    assert trainer.callback_metrics["half"].dtype == torch.float32
