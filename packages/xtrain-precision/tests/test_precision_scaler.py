"""16-mixed's gradient scaler: skipped steps, clipping after unscaling, exact save and resume, options."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import Callback, CheckpointError, ConfigError, Trainer, TrainModule, seed_everything
from xtrain.core.testing import TinyClassifier, tiny_loaders
from xtrain.precision import BFloat16MixedPrecision, Float16MixedPrecision


class Scheduled(TinyClassifier):
    """TinyClassifier with a per-step LR schedule, so a skipped step is visible in the learning rate."""

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class Watch(Callback):
    """Forces an inf gradient at ``inf_at`` and records, per step, the scale, whether weights moved, and the LR."""

    def __init__(self, inf_at: int | None = None, bad: float = math.inf) -> None:
        self.inf_at = inf_at
        self.bad = bad
        self.scales: list[float] = []
        self.moved: list[bool] = []
        self.lrs: list[float] = []
        self.start_state: dict[str, Any] | None = None
        self._before: torch.Tensor | None = None

    def on_train_start(self, trainer: Trainer, module: TrainModule) -> None:
        self.start_state = copy.deepcopy(trainer.strategy.precision.state_dict())

    def on_after_backward(self, trainer: Trainer, module: TrainModule) -> None:
        if trainer.global_step == self.inf_at:
            next(module.parameters()).grad[0, 0] = self.bad

    def on_before_optimizer_step(self, trainer: Trainer, module: TrainModule, optimizer: Any) -> None:
        self._before = torch.cat([p.detach().flatten().clone() for p in module.parameters()])

    def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        after = torch.cat([p.detach().flatten() for p in module.parameters()])
        assert self._before is not None
        self.moved.append(not torch.equal(self._before, after))
        scaler = getattr(trainer.strategy.precision, "scaler", None)
        self.scales.append(scaler.get_scale() if scaler is not None else math.nan)
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_an_inf_gradient_skips_the_step_lowers_the_scale_and_holds_the_scheduler(
        quiet: Callable[..., Trainer], bad: float) -> None:
    seed_everything(0)
    watch = Watch(inf_at=3, bad=bad)
    trainer = quiet(precision=Float16MixedPrecision(init_scale=2.0**10), max_steps=8, callbacks=[watch])
    module = Scheduled()
    trainer.fit(module, tiny_loaders()[0])
    assert watch.moved == [True, True, True, False, True, True, True, True]
    assert watch.scales == [1024.0] * 3 + [512.0] * 5
    # Seven real steps: the scheduler stepped seven times, not eight.
    assert watch.lrs[-1] == pytest.approx(0.1 * 0.9**7)
    assert watch.lrs[3] == watch.lrs[2]
    assert trainer.global_step == 8
    assert module.losses[-1] < module.losses[0]


def test_the_default_scale_backs_off_from_a_real_overflow(quiet: Callable[..., Trainer]) -> None:
    """TinyClassifier's first float16 gradients overflow at the default scale 2**16: that step is skipped."""
    seed_everything(0)
    watch = Watch()
    quiet(precision="16-mixed", max_steps=4, callbacks=[watch]).fit(TinyClassifier(), tiny_loaders()[0])
    assert watch.moved[0] is False and watch.scales[0] == 2.0**15
    assert all(watch.moved[1:])


def test_clipping_unscales_first_and_only_once(quiet: Callable[..., Trainer]) -> None:
    trainer = quiet(precision="16-mixed")
    strategy = trainer.strategy
    torch.manual_seed(0)
    module = strategy.setup(torch.nn.Linear(8, 4))
    reference = copy.deepcopy(module)
    opt = torch.optim.SGD(module.parameters(), lr=1.0)
    x = torch.randn(16, 8)
    with strategy.precision.forward_context():
        loss = module(x).float().pow(2).mean()
    strategy.backward(loss)
    reference(x).pow(2).mean().backward()
    true_norm = torch.cat([p.grad.flatten() for p in reference.parameters()]).norm()

    norm = strategy.clip_gradients(opt, value=0.01)
    again = strategy.clip_gradients(opt, value=0.01)  # GradScaler alone would raise here
    assert norm is not None and again is not None
    assert float(norm) == pytest.approx(float(true_norm), rel=1e-2), "clipping saw scaled gradients"
    assert float(again) == pytest.approx(0.01, rel=1e-3)
    grads = [p.grad.clone() for p in module.parameters()]
    before = [p.detach().clone() for p in module.parameters()]
    assert strategy.optimizer_step(opt) is True
    for p, b, g in zip(module.parameters(), before, grads, strict=True):
        torch.testing.assert_close(p.detach(), b - g)  # lr 1: the step used the clipped gradients as they were


def test_accumulation_and_clipping_train(quiet: Callable[..., Trainer]) -> None:
    seed_everything(0)
    module = TinyClassifier()
    trainer = quiet(precision=Float16MixedPrecision(init_scale=2.0**10), max_steps=8, accumulate_grad_batches=2,
                    gradient_clip_val=1.0)
    trainer.fit(module, tiny_loaders()[0])
    assert trainer.global_step == 8 and len(module.losses) == 16
    assert module.losses[-1] < 0.5 * module.losses[0]


def _run(quiet: Callable[..., Trainer], precision: Any, steps: int, root: Path,
         ckpt_path: Path | None = None) -> tuple[TinyClassifier, Trainer, Watch]:
    seed_everything(0)
    watch = Watch(inf_at=4)
    module = TinyClassifier()
    trainer = quiet(precision=precision, max_steps=steps, callbacks=[watch], default_root_dir=root)
    trainer.fit(module, tiny_loaders()[0], ckpt_path=ckpt_path)
    return module, trainer, watch


def test_save_and_resume_restore_the_scaler_exactly(quiet: Callable[..., Trainer], tmp_path: Path) -> None:
    def options() -> Float16MixedPrecision:
        return Float16MixedPrecision(init_scale=2.0**10, growth_interval=3)

    full, full_trainer, _ = _run(quiet, options(), 12, tmp_path / "full")
    _, half_trainer, _ = _run(quiet, options(), 6, tmp_path / "half")
    saved_state = copy.deepcopy(half_trainer.strategy.precision.state_dict())
    ckpt = tmp_path / "step6.ckpt"
    half_trainer.save_checkpoint(ckpt)
    assert torch.load(ckpt, weights_only=True)["precision"] == saved_state
    assert saved_state["scaler"]["_growth_tracker"] > 0, "pick steps where the growth tracker is mid-way"

    # Resume into a scaler with default options: everything must come from the checkpoint.
    resumed, resumed_trainer, watch = _run(quiet, "16-mixed", 12, tmp_path / "resumed", ckpt_path=ckpt)
    assert watch.start_state == saved_state
    assert resumed_trainer.strategy.precision.state_dict() == full_trainer.strategy.precision.state_dict()
    assert resumed.losses == full.losses[6:], "the resumed run diverged from the uninterrupted one"
    for a, b in zip(resumed.parameters(), full.parameters(), strict=True):
        assert torch.equal(a, b)


def test_checkpoints_move_between_mixed_precisions(quiet: Callable[..., Trainer], tmp_path: Path) -> None:
    _, fp16, _ = _run(quiet, "16-mixed", 3, tmp_path / "a")
    fp16.save_checkpoint(tmp_path / "fp16.ckpt")
    _, bf16, _ = _run(quiet, "bf16-mixed", 5, tmp_path / "b", ckpt_path=tmp_path / "fp16.ckpt")
    assert bf16.global_step == 5 and bf16.strategy.precision.state_dict() == {}
    bf16.save_checkpoint(tmp_path / "bf16.ckpt")
    fresh = Float16MixedPrecision(init_scale=2.0**9)
    _, back, _ = _run(quiet, fresh, 7, tmp_path / "c", ckpt_path=tmp_path / "bf16.ckpt")
    assert back.global_step == 7 and fresh.scaler.get_scale() <= 2.0**9


def test_a_corrupt_scaler_state_is_a_checkpoint_error() -> None:
    p = Float16MixedPrecision()
    p.connect(device_type="cpu")
    with pytest.raises(CheckpointError, match="not a GradScaler state"):
        p.load_state_dict({"scaler": {"scale": 1.0}})


def test_state_loaded_before_connect_survives_connecting() -> None:
    source = Float16MixedPrecision(init_scale=2.0**5, growth_interval=7)
    state = source.state_dict()
    target = Float16MixedPrecision()
    target.load_state_dict(state)
    target.connect(device_type="cpu")
    assert target.state_dict() == state
    assert BFloat16MixedPrecision().state_dict() == {}


@pytest.mark.parametrize(("kwargs", "argument"), [
    ({"init_scale": 0.0}, "init_scale"), ({"init_scale": math.inf}, "init_scale"),
    ({"growth_factor": 1.0}, "growth_factor"), ({"backoff_factor": 1.0}, "backoff_factor"),
    ({"backoff_factor": 0.0}, "backoff_factor"), ({"growth_interval": 0}, "growth_interval"),
    ({"growth_interval": 2.5}, "growth_interval"), ({"growth_interval": True}, "growth_interval"),
    ({"scaler": torch.amp.GradScaler("cpu"), "init_scale": 8.0}, "init_scale"),
    ({"scaler": "yes"}, "scaler"),
])
def test_invalid_scaler_options_are_config_errors(kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(ConfigError, match=f"^{argument}=") as info:
        Float16MixedPrecision(**kwargs)
    assert "Fix:" in str(info.value)


def test_a_given_scaler_is_used_and_must_match_the_device(quiet: Callable[..., Trainer]) -> None:
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
    trainer = quiet(precision=Float16MixedPrecision(scaler=scaler), max_steps=2)
    trainer.fit(TinyClassifier(), tiny_loaders()[0])
    assert trainer.strategy.precision.scaler is scaler  # type: ignore[attr-defined]
    assert scaler.get_scale() == 2.0**4
    with pytest.raises(ConfigError, match="scales on 'cuda'"):
        Float16MixedPrecision(scaler=torch.amp.GradScaler("cuda", enabled=False)).connect(device_type="cpu")


def test_manual_optimization_steps_through_the_strategy(quiet: Callable[..., Trainer]) -> None:
    """Under manual optimization, manual_backward scales and the optimizers from self.optimizers() step through the
    strategy: opt.step() unscales, skips an overflowing step and updates the scale."""

    class Manual(TinyClassifier):
        automatic_optimization = False

        def __init__(self) -> None:
            super().__init__()
            self.stepped: list[bool] = []

        def training_step(self, batch: Any, batch_idx: int) -> None:
            opt = self.optimizers()
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self(x).float(), y)
            self.losses.append(float(loss.detach()))
            opt.zero_grad()
            self.manual_backward(loss)
            self.clip_gradients(opt, 1.0)
            self.stepped.append(opt.step())

    seed_everything(0)
    module = Manual()
    quiet(precision="16-mixed", max_steps=8).fit(module, tiny_loaders()[0])
    assert module.stepped == [False] + [True] * 7, "the first step's float16 gradients overflow at scale 2**16"
    assert module.losses[-1] < 0.5 * module.losses[0]
