"""torch.compile with the Trainer: a compiled module (``torch.compile(module)`` or ``module.compile()``) trains like
the eager one, keeps its parameter names, and switching between fit and validation does not recompile.

``aot_eager`` keeps these fast; inductor (the system C++ compiler) runs in the model-parallel session and the
compile benchmark.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from xtrain.core import Trainer, TrainModule
from xtrain.core.testing import tiny_dataset


class Net(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.losses.append(float(loss.detach()))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Counting:
    """A backend that counts the graphs it is asked to compile."""

    def __init__(self) -> None:
        from torch._dynamo.backends.registry import lookup_backend

        self.graphs = 0
        self._real = lookup_backend("aot_eager")

    def __call__(self, graph: Any, inputs: Any) -> Any:
        self.graphs += 1
        return self._real(graph, inputs)


def fit(model: Any, epochs: int) -> Trainer:
    torch.manual_seed(0)
    loader = DataLoader(tiny_dataset(32), batch_size=8)
    trainer = Trainer(accelerator="cpu", max_epochs=epochs, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(model, loader, loader)
    return trainer


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Any:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_a_torch_compile_wrapper_trains_like_eager_and_keeps_parameter_names() -> None:
    torch.manual_seed(0)
    eager = Net()
    torch.manual_seed(0)
    inner = Net()
    backend = Counting()
    fit(eager, 2)
    trainer = fit(torch.compile(inner, backend=backend), 2)
    assert trainer.module is inner and backend.graphs > 0
    assert set(inner.state_dict()) == set(eager.state_dict())  # no "_orig_mod." prefix
    assert inner.losses == pytest.approx(eager.losses, abs=1e-5)
    for a, b in zip(inner.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_switching_between_fit_and_validation_does_not_recompile() -> None:
    model = Net()
    backend = Counting()
    model.compile(backend=backend)
    fit(model, 1)  # one training and one evaluation graph
    first = backend.graphs
    trainer = fit(model, 3)  # three more rounds of train -> validate -> train
    assert 1 <= first <= 2 and backend.graphs == first, (first, backend.graphs)
    # validate() runs under inference_mode, fit's validation under no_grad (as Lightning's): one graph more, once
    trainer.validate(model, DataLoader(tiny_dataset(32), batch_size=8))
    after_validate = backend.graphs
    trainer.validate(model, DataLoader(tiny_dataset(32), batch_size=8))
    assert after_validate <= first + 1 and backend.graphs == after_validate, (first, after_validate, backend.graphs)


def test_validate_test_and_predict_take_the_compiled_wrapper_after_fit() -> None:
    """``trainer.validate(torch.compile(model))`` after fitting it, as Lightning runs it: the wrapper's truth value
    asks the module for ``len()``, which a module without ``__len__`` refuses (a TypeError was raised)."""
    compiled = torch.compile(Net(), backend=Counting())
    trainer = fit(compiled, 1)
    loader = DataLoader(tiny_dataset(32), batch_size=8)
    (result,) = trainer.validate(compiled, loader, verbose=False)
    assert result["val_loss"] > 0
    assert len(trainer.predict(compiled, loader)) == 4  # type: ignore[arg-type]
