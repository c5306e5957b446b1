"""Training on CPU under every precision: the loss decreases and the dtypes inside the step are the expected ones."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from xtrain.core import Trainer, seed_everything
from xtrain.core.testing import TinyClassifier, tiny_dataset, tiny_loaders

# precision: (parameters, activations, inputs and tensors created inside the step).
EXPECTED: dict[str, tuple[torch.dtype, torch.dtype, torch.dtype]] = {
    "32-true": (torch.float32, torch.float32, torch.float32),
    "64-true": (torch.float64, torch.float64, torch.float64),
    "16-mixed": (torch.float32, torch.float16, torch.float32),
    "bf16-mixed": (torch.float32, torch.bfloat16, torch.float32),
    "16-true": (torch.float16, torch.float16, torch.float16),
    "bf16-true": (torch.bfloat16, torch.bfloat16, torch.bfloat16),
}


class DtypeRecorder(TinyClassifier):
    """TinyClassifier that records the dtypes it sees in every stage."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen: dict[str, set[torch.dtype]] = defaultdict(set)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen["input"].add(batch[0].dtype)
        self.seen["label"].add(batch[1].dtype)
        self.seen["created"].add(torch.zeros(1).dtype)
        return super().training_step(batch, batch_idx)

    def on_after_backward(self) -> None:
        self.seen["grad"].update(p.grad.dtype for p in self.parameters() if p.grad is not None)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.seen["val_activation"].add(self(batch[0]).dtype)
        super().validation_step(batch, batch_idx)

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        out = self(batch[0])
        self.seen["predict_activation"].add(out.dtype)
        return out


def fit(quiet: Callable[..., Trainer], precision: Any, steps: int = 16, **kwargs: Any) -> tuple[DtypeRecorder, Trainer]:
    seed_everything(0)
    train, val = tiny_loaders(batch_size=16)
    module = DtypeRecorder(lr=kwargs.pop("lr", 0.1))
    trainer = quiet(precision=precision, max_steps=steps, **kwargs)
    trainer.fit(module, train, val)
    return module, trainer


@pytest.mark.parametrize("precision", list(EXPECTED))
def test_trains_with_the_expected_dtypes_in_every_stage(quiet: Callable[..., Trainer], precision: str) -> None:
    params, activations, inputs = EXPECTED[precision]
    module, trainer = fit(quiet, precision)
    assert module.losses[-1] < 0.5 * module.losses[0], module.losses
    assert module.param_dtypes == {params} and module.activation_dtypes == {activations}
    assert module.seen["input"] == {inputs} and module.seen["created"] == {inputs}
    assert module.seen["label"] == {torch.int64}, "integer labels must never be converted"
    assert module.seen["grad"] == {params}
    assert module.seen["val_activation"] == {activations}, "validation must run in the same precision as training"
    assert trainer.callback_metrics["train_loss"].dtype == torch.float32  # predict() starts with empty metrics
    predictions = trainer.predict(module, tiny_loaders(batch_size=16)[1])
    assert module.seen["predict_activation"] == {activations}
    assert {p.dtype for p in predictions} == {activations}
    assert torch.get_default_dtype() == torch.float32


def test_64_true_trains_in_float64_end_to_end(quiet: Callable[..., Trainer], tmp_path: Path) -> None:
    class Adam64(DtypeRecorder):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self(x), y)
            self.seen["loss"].add(loss.dtype)
            self.seen["input"].add(x.dtype)
            self.losses.append(float(loss.detach()))
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=1e-2)

    seed_everything(0)
    module = Adam64()
    trainer = quiet(precision="64-true", max_steps=8)
    trainer.fit(module, tiny_loaders(batch_size=16)[0])
    assert module.seen["loss"] == {torch.float64} and module.seen["input"] == {torch.float64}
    assert module.seen["grad"] == {torch.float64}
    state = trainer.optimizers[0].state
    assert {t.dtype for s in state.values() for k, t in s.items() if k != "step"} == {torch.float64}
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    saved = torch.load(tmp_path / "a.ckpt", weights_only=True)
    assert {t.dtype for t in saved["state_dict"].values()} == {torch.float64}
    assert module.losses[-1] < module.losses[0]


def test_bf16_mixed_stays_close_to_32_true(quiet: Callable[..., Trainer]) -> None:
    """Same seed, same data, 32 SGD steps. Measured on torch 2.13 CPU: per-step |loss difference| <= 0.002 (losses
    1.7 -> 0.04) and a relative parameter difference of 4e-4; the bounds below leave a 10x margin."""
    ref, _ = fit(quiet, "32-true", steps=32, lr=0.05)
    mixed, _ = fit(quiet, "bf16-mixed", steps=32, lr=0.05)
    loss_diff = (torch.tensor(ref.losses) - torch.tensor(mixed.losses)).abs()
    assert loss_diff.max() <= 0.02, loss_diff
    assert loss_diff.max() > 0, "bf16-mixed gave float32's exact losses: autocast did not run"
    a = torch.cat([p.detach().flatten() for p in ref.parameters()])
    b = torch.cat([p.detach().flatten() for p in mixed.parameters()])
    assert (a - b).norm() / a.norm() <= 5e-3


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-true", torch.bfloat16), ("16-true", torch.float16),
                                                  ("64-true", torch.float64), ("bf16-mixed", torch.float32),
                                                  ("32-true", torch.float32)])
def test_init_module_creates_parameters_in_the_training_dtype(quiet: Callable[..., Trainer], precision: str,
                                                              dtype: torch.dtype) -> None:
    trainer = quiet(precision=precision, max_steps=4)
    with trainer.init_module():
        module = TinyClassifier()
    assert torch.get_default_dtype() == torch.float32
    assert {p.dtype for p in module.parameters()} == {dtype}
    trainer.fit(module, tiny_loaders(batch_size=16)[0])
    assert {p.dtype for p in module.parameters()} == {dtype}


def test_default_dtype_is_restored_when_the_step_raises(quiet: Callable[..., Trainer]) -> None:
    class Boom(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        quiet(precision="bf16-true", max_steps=1).fit(Boom(), tiny_loaders()[0])
    assert torch.get_default_dtype() == torch.float32


def test_logged_values_under_bf16_true_are_accurate_epoch_means(quiet: Callable[..., Trainer]) -> None:
    """Epoch means of bfloat16 values accumulate in float32 (accumulated in bfloat16, 64 batches of 16 give 1.3125
    for the mean of 1.296875), and a Python number logged inside the step is not rounded to bfloat16."""

    class Logs(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("const", torch.tensor(1.3, dtype=torch.bfloat16), batch_size=16)
            self.log("python_number", 0.1, batch_size=16)

    trainer = quiet(precision="bf16-true")
    module = Logs()
    (metrics,) = trainer.validate(module, DataLoader(tiny_dataset(1024), batch_size=16))
    assert metrics["const"] == pytest.approx(float(torch.tensor(1.3, dtype=torch.bfloat16)), abs=1e-6)
    assert metrics["python_number"] == pytest.approx(0.1, abs=1e-7)
