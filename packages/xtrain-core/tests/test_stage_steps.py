"""A stage the module has no step for is refused before it starts, as in Lightning (it ran and returned ``[{}]``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from xtrain.core import ConfigError, Trainer, TrainModule
from xtrain.core.testing import tiny_dataset


class TrainOnly(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(16, 4)
        self.batches = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(**kwargs: Any) -> Trainer:
    return Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                   **kwargs)


def _loader() -> DataLoader[Any]:
    return DataLoader(tiny_dataset(32), batch_size=8)


@pytest.mark.parametrize(("stage", "step"), [("validate", "validation_step"), ("test", "test_step")])
def test_validate_or_test_without_its_step_is_refused(stage: str, step: str) -> None:
    with pytest.raises(ConfigError, match=rf"{step}=None: trainer.{stage}\(\) runs TrainOnly.{step}.*Fix: define "
                                          rf"{step}\(self, batch, batch_idx\)"):
        getattr(_trainer(), stage)(TrainOnly(), _loader())


def test_predict_without_forward_or_predict_step_is_refused_and_with_forward_runs() -> None:
    with pytest.raises(ConfigError, match=r"predict_step=None: .*defines neither.*Fix: define forward"):
        _trainer().predict(TrainOnly(), _loader())

    class WithForward(TrainOnly):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(x)  # type: ignore[no-any-return]

    out = _trainer().predict(WithForward(), _loader())
    assert out is not None and len(out) == 4 and out[0].shape == (8, 4)


def test_fit_with_validation_data_but_no_validation_step_warns_and_skips_it() -> None:
    seen: list[int] = []

    class Counted(torch.utils.data.Dataset[Any]):
        def __len__(self) -> int:
            return 8

        def __getitem__(self, i: int) -> Any:
            seen.append(i)
            return torch.zeros(16), torch.tensor(0)

    trainer = _trainer(max_epochs=2)
    with pytest.warns(UserWarning, match="defines no validation_step, so fit skips validation"):
        trainer.fit(TrainOnly(), _loader(), DataLoader(Counted(), batch_size=4))
    assert seen == [], "no validation batch is loaded (the sanity check neither)"
    assert trainer.global_step == 8
