"""The Engine's ``optimizer.step()`` goes through the strategy and the precision plugin, as the Trainer's step.

Found by an outside tester: under ``16-mixed`` the set-up optimizer stepped with the scaled gradients (the loss went
NaN, a weight went to inf), and a plugin's own ``optimizer_step`` was never called by the Engine.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
import torch
from torch import nn
from typing_extensions import override

from xtrain.core import ConfigError, Engine
from xtrain.core._internal.engine_optimizer import route_step
from xtrain.core._internal.nonfinite import NonFiniteCheck, skippable_step
from xtrain.core.defaults import SinglePrecision

pytestmark = pytest.mark.filterwarnings("ignore:precision='16-mixed' on the CPU")


class CountingPrecision(SinglePrecision):
    """A third-party plugin owning the step (as one that unscales its own loss scaling would)."""

    name: ClassVar[str] = "test-counting"

    def __init__(self, *, skip: bool = False) -> None:
        super().__init__()
        self.calls = {"backward": 0, "step": 0}
        self.closures: list[Callable[[], Any] | None] = []
        self.skip = skip

    @override
    def backward(self, loss: torch.Tensor) -> None:
        self.calls["backward"] += 1
        super().backward(loss)

    @override
    def optimizer_step(self, optimizer: torch.optim.Optimizer, *,
                       closure: Callable[[], Any] | None = None) -> bool:
        self.calls["step"] += 1
        self.closures.append(closure)
        if self.skip:
            return False
        return super().optimizer_step(optimizer, closure=closure)


def _mixed_engine(**options: Any) -> Engine:
    pytest.importorskip("xtrain.precision")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 16-mixed on a CPU without float16 arithmetic: a speed warning
        return Engine(accelerator="cpu", precision="16-mixed", **options)


def _zero_linear() -> nn.Linear:
    layer = nn.Linear(1, 1)
    nn.init.zeros_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


def _overflowing_step(engine: Engine, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """A loss whose scaled float16 gradient (2 * 65536) overflows: the scaler must skip the step."""
    loss = nn.functional.mse_loss(model(torch.ones(1, 1)), torch.ones(1, 1))
    optimizer.zero_grad()
    engine.backward(loss)
    optimizer.step()


def test_16_mixed_skips_the_overflowing_step_and_lowers_the_scale() -> None:
    engine = _mixed_engine()
    layer = _zero_linear()
    original = torch.optim.SGD(layer.parameters(), lr=1e-3)
    model, optimizer = engine.setup(layer, original)
    scaler = engine.strategy.precision.scaler  # type: ignore[attr-defined]
    _overflowing_step(engine, model, optimizer)
    assert layer.weight.item() == 0.0 and optimizer.step_was_skipped
    assert scaler.get_scale() == 2.0**15
    _overflowing_step(engine, model, optimizer)  # 2 * 32768 still rounds to inf in float16
    _overflowing_step(engine, model, optimizer)
    assert not optimizer.step_was_skipped and scaler.get_scale() == 2.0**14
    assert layer.weight.item() == pytest.approx(2e-3)  # unscaled: lr * 2, not lr * 2 * 16384
    assert optimizer.state_dict()["param_groups"][0]["lr"] == 1e-3
    assert optimizer is original  # the user's own object: isinstance, schedulers and state_dict keep working


def _regression(engine: Engine, steps: int) -> list[float]:
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = x @ torch.randn(8, 1) + 0.01 * torch.randn(256, 1)
    model, optimizer = engine.setup(nn.Linear(8, 1), torch.optim.SGD(nn.Linear(8, 1).parameters(), lr=0.1))
    optimizer = engine.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
    losses = []
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        engine.backward(loss)
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_16_mixed_trains_like_32_true() -> None:
    single = _regression(Engine(accelerator="cpu"), steps=40)
    mixed = _regression(_mixed_engine(), steps=40)
    assert all(torch.isfinite(torch.tensor(mixed)))
    assert mixed[-1] < 0.05 * mixed[0]
    assert mixed[-1] == pytest.approx(single[-1], rel=0.1, abs=1e-3)


def test_clip_gradients_then_step_unscales_once() -> None:
    results = []
    for engine in (Engine(accelerator="cpu"), _mixed_engine()):
        torch.manual_seed(1)
        layer = nn.Linear(4, 1)
        model, optimizer = engine.setup(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
        loss = model(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        engine.backward(loss)
        engine.clip_gradients(model, optimizer, max_norm=1e6)  # unscales; clips nothing
        optimizer.step()
        results.append(layer.weight.detach().clone())
    torch.testing.assert_close(results[1], results[0], rtol=1e-2, atol=1e-3)


def test_a_custom_plugin_steps_once_per_optimizer_step() -> None:
    precision = CountingPrecision()
    engine = Engine(accelerator="cpu", precision=precision)
    model, optimizer = engine.setup(nn.Linear(2, 1), torch.optim.Adam(nn.Linear(2, 1).parameters()))
    optimizer = engine.setup_optimizers(torch.optim.Adam(model.parameters()))
    before = model.module.weight.detach().clone()
    for _ in range(3):
        optimizer.zero_grad()
        engine.backward(model(torch.randn(4, 2)).sum())
        optimizer.step()
    assert precision.calls == {"backward": 3, "step": 3}
    assert precision.closures == [None, None, None]
    assert not torch.equal(model.module.weight, before)
    assert optimizer.state_dict()["state"][0]["step"] == 3


def test_a_step_the_plugin_skips_is_reported() -> None:
    engine = Engine(accelerator="cpu", precision=CountingPrecision(skip=True))
    layer = nn.Linear(2, 1)
    model, optimizer = engine.setup(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
    before = layer.weight.detach().clone()
    engine.backward(model(torch.randn(4, 2)).sum())
    assert optimizer.step() is None
    assert optimizer.step_was_skipped and torch.equal(layer.weight, before)


def test_lbfgs_closure_goes_through_the_plugin() -> None:
    precision = CountingPrecision()
    engine = Engine(accelerator="cpu", precision=precision)
    torch.manual_seed(0)
    x = torch.randn(32, 3)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]])
    layer = nn.Linear(3, 1)
    model, optimizer = engine.setup(layer, torch.optim.LBFGS(layer.parameters(), max_iter=20))

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        engine.backward(loss)
        return loss

    first = optimizer.step(closure)
    assert isinstance(first, torch.Tensor) and first.item() > 0.1  # the optimizer's own return value
    optimizer.step(closure)
    assert precision.calls["step"] == 2 and precision.closures == [closure, closure]
    assert precision.calls["backward"] > 2
    assert nn.functional.mse_loss(model(x), y).item() < 1e-4


def test_lbfgs_under_16_mixed_is_refused() -> None:
    engine = _mixed_engine()
    layer = nn.Linear(3, 1)
    model, optimizer = engine.setup(layer, torch.optim.LBFGS(layer.parameters()))

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss: torch.Tensor = model(torch.randn(4, 3)).sum()
        engine.backward(loss)
        return loss

    with pytest.raises(ConfigError, match="closure"):
        optimizer.step(closure)


def test_skip_mode_with_16_mixed() -> None:
    engine = _mixed_engine(on_nonfinite_loss="skip")
    layer = nn.Linear(2, 1)
    model, optimizer = engine.setup(layer, torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9))
    scaler = engine.strategy.precision.scaler  # type: ignore[attr-defined]
    before = layer.weight.detach().clone()
    with pytest.warns(UserWarning, match="on_nonfinite_loss='skip'"):
        engine.backward(model(torch.randn(4, 2)).sum() * float("nan"))
    optimizer.step()
    assert optimizer.step_was_skipped and torch.equal(layer.weight, before)
    assert scaler.get_scale() == 2.0**16 and not optimizer.state_dict()["state"]
    optimizer.zero_grad()
    engine.backward(model(torch.randn(4, 2)).mean() * 1e-2)  # small enough not to overflow at scale 2**16
    optimizer.step()
    assert not optimizer.step_was_skipped and bool(torch.isfinite(layer.weight).all())
    assert not torch.equal(layer.weight, before)


@pytest.mark.parametrize("skip_first", [True, False])
def test_skip_guard_and_routed_step_compose_in_either_order(skip_first: bool) -> None:
    precision = CountingPrecision()
    engine = Engine(accelerator="cpu", precision=precision)
    layer = nn.Linear(2, 1)
    model = engine.setup(layer)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    check = NonFiniteCheck("skip", every=1)
    if skip_first:
        skippable_step(optimizer, check)
    route_step(optimizer, engine.strategy)
    if not skip_first:
        skippable_step(optimizer, check)
    before = layer.weight.detach().clone()
    engine.backward(model(torch.randn(4, 2)).sum())
    check.last_skipped = True
    optimizer.step()
    assert torch.equal(layer.weight, before) and optimizer.step_was_skipped  # type: ignore[attr-defined]
    check.last_skipped = False
    optimizer.step()
    assert not torch.equal(layer.weight, before) and not optimizer.step_was_skipped  # type: ignore[attr-defined]
    assert precision.calls["step"] == (2 if skip_first else 1)  # an outer guard stops before the plugin


def test_scheduler_created_after_setup_does_not_warn(recwarn: pytest.WarningsRecorder) -> None:
    engine = _mixed_engine()
    layer = _zero_linear()
    model, optimizer = engine.setup(layer, torch.optim.SGD(layer.parameters(), lr=1e-3))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    recwarn.clear()
    _overflowing_step(engine, model, optimizer)  # skipped by the scaler: the scheduler must still see the call
    assert optimizer.step_was_skipped
    scheduler.step()
    assert not [w for w in recwarn if "lr_scheduler" in str(w.message) or "optimizer.step" in str(w.message)]
    assert optimizer.param_groups[0]["lr"] == pytest.approx(5e-4)


def test_scheduler_created_before_setup_keeps_working(recwarn: pytest.WarningsRecorder) -> None:
    engine = _mixed_engine()
    layer = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer = engine.setup(layer, optimizer)
    recwarn.clear()
    for _ in range(2):
        optimizer.zero_grad()
        engine.backward(model(torch.randn(4, 2)).mean() * 1e-2)
        optimizer.step()
        scheduler.step()
    assert not [w for w in recwarn if "lr_scheduler" in str(w.message) or "optimizer.step" in str(w.message)]
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.025) and not optimizer.step_was_skipped
    assert bool(torch.isfinite(layer.weight).all())


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_precisions_without_their_own_step_leave_the_step_alone(precision: str) -> None:
    if precision != "32-true":
        pytest.importorskip("xtrain.precision")
    engine = Engine(accelerator="cpu", precision=precision)
    layer = nn.Linear(2, 1)
    model, optimizer = engine.setup(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
    assert "step" not in vars(optimizer)  # the class's own step: no cost per step
    before = layer.weight.detach().clone()
    engine.backward(model(torch.randn(4, 2)).sum())
    optimizer.step()
    assert not optimizer.step_was_skipped and not torch.equal(layer.weight, before)


def test_scheduler_created_after_setup_in_skip_mode(recwarn: pytest.WarningsRecorder) -> None:
    """The skip guard is a bound method, as torch's step: a scheduler wraps ``optimizer.step.__func__``."""
    engine = Engine(accelerator="cpu", on_nonfinite_loss="skip")
    layer = nn.Linear(2, 1)
    model, optimizer = engine.setup(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    recwarn.clear()
    engine.backward(model(torch.randn(4, 2)).sum())
    optimizer.step()
    scheduler.step()
    assert not recwarn.list and not optimizer.step_was_skipped
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)


def test_skip_mode_leaves_the_scaler_alone_with_stale_gradients() -> None:
    """Outside trial S2: with ``zero_grad(set_to_none=False)`` a skipped batch still stepped the scaler, which
    counted it as a good step (the scale doubled at growth_interval=1). A skipped batch reaches neither the plugin nor
    the optimizer, and clip_gradients unscales nothing on it."""
    engine = _mixed_engine(on_nonfinite_loss="skip")
    layer = nn.Linear(2, 1)
    model, optimizer = engine.setup(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
    scaler = engine.strategy.precision.scaler  # type: ignore[attr-defined]
    scaler.set_growth_factor(2.0)
    scaler._growth_interval = 1  # every good step doubles the scale: a counted skipped batch would show
    engine.backward(model(torch.randn(4, 2)).mean() * 1e-3)
    optimizer.step()
    scale = scaler.get_scale()
    optimizer.zero_grad(set_to_none=False)
    before = layer.weight.detach().clone()
    with pytest.warns(UserWarning, match="on_nonfinite_loss='skip'"):
        engine.backward(model(torch.randn(4, 2)).sum() * float("nan"))
    assert engine.clip_gradients(model, optimizer, max_norm=1.0) is None
    optimizer.step()
    assert optimizer.step_was_skipped and torch.equal(layer.weight, before)
    assert scaler.get_scale() == scale, "a skipped batch counted as a step of the scaler"
    engine.backward(model(torch.randn(4, 2)).mean() * 1e-3)
    assert engine.clip_gradients(model, optimizer, max_norm=1.0) is not None  # unscales now, once
    optimizer.step()
    assert not optimizer.step_was_skipped and scaler.get_scale() == 2 * scale


def _resumable_run(engine: Engine, steps: range, state_path: Any = None, load_from: Any = None) -> list[float]:
    torch.manual_seed(0)
    layer = nn.Linear(4, 1)
    model, optimizer = engine.setup(layer, torch.optim.SGD(layer.parameters(), lr=1e-3))
    scaler = engine.strategy.precision.scaler  # type: ignore[attr-defined]
    if load_from is not None:
        engine.load(load_from, {"model": model, "optimizer": optimizer})
    data = torch.Generator().manual_seed(1)
    xs = [torch.randn(8, 4, generator=data) * 30 for _ in range(12)]
    trace = []
    for i in steps:
        optimizer.zero_grad()
        engine.backward(nn.functional.mse_loss(model(xs[i]), xs[i].sum(-1, keepdim=True)))
        optimizer.step()
        trace.append(scaler.get_scale())
        if state_path is not None and i == 5:
            engine.save(state_path, {"model": model, "optimizer": optimizer})
    return trace + layer.weight.detach().flatten().tolist()


def test_engine_save_keeps_the_scalers_state_so_a_resumed_run_scales_as_the_uninterrupted_one(tmp_path: Any) -> None:
    """Outside trial S2: the checkpoint held no scaler state; after load the scale was back at its initial value
    and the resumed run skipped other steps than the uninterrupted one."""
    whole = _resumable_run(_mixed_engine(), range(12), state_path=tmp_path / "mid.ckpt")
    assert len(set(whole[:12])) > 1, "the run must change its scale for this test to mean something"
    resumed = _resumable_run(_mixed_engine(), range(6, 12), load_from=tmp_path / "mid.ckpt")
    assert resumed == whole[6:]
    assert "xtrain_precision" in torch.load(tmp_path / "mid.ckpt", weights_only=True)
    bf16 = Engine(accelerator="cpu", precision="bf16-mixed")  # another precision: its own state, nothing to restore
    layer = nn.Linear(4, 1)
    model, optimizer = bf16.setup(layer, torch.optim.SGD(layer.parameters(), lr=1e-3))
    assert bf16.load(tmp_path / "mid.ckpt", {"model": model, "optimizer": optimizer}) == {}


def test_a_scaled_precisions_overflow_warning_says_the_scaler_skips_it() -> None:
    engine = _mixed_engine()
    layer = nn.Linear(2, 1)
    model, _ = engine.setup(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
    with pytest.warns(UserWarning, match="the training loss became non-finite") as caught:
        engine.backward(model(torch.randn(4, 2)).sum() * float("inf"))
    message = str(caught[0].message)
    assert "at step 0;" in message and "(epoch" not in message, message  # no dataloader: no invented epoch
    assert "precision '16-mixed''s gradient scaler skips each optimizer step" in message, message
    assert "probably NaN" not in message, message
