"""A NaN/inf training loss: warned about with its step, epoch and batch, or refused, or skipped (one process)."""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import Engine, Trainer
from xtrain.core.errors import ConfigError, NonFiniteLossError
from xtrain.core.testing import TinyClassifier, tiny_loaders


class Diverging(TinyClassifier):
    """Returns an inf (or NaN) loss at the chosen batches (counted over the run): a loss that blew up."""

    def __init__(self, bad_batches: set[int], value: float = math.inf) -> None:
        super().__init__()
        self.bad_batches = bad_batches
        self.value = value
        self.calls = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.calls += 1
        return loss * self.value if self.calls - 1 in self.bad_batches else loss


def _trainer(tmp_path: Path, **kwargs: Any) -> Trainer:
    options: dict[str, Any] = {"accelerator": "cpu", "devices": 1, "max_epochs": 2, "default_root_dir": tmp_path,
                               "logger": False, "enable_progress_bar": False, "enable_model_summary": False,
                               "enable_checkpointing": False, "num_sanity_val_steps": 0}
    return Trainer(**{**options, **kwargs})


def test_warn_names_first_step_epoch_and_batch(tmp_path: Path) -> None:
    model = Diverging({19, 21}, value=math.nan)  # 16 batches per epoch: step 19 is epoch 1, batch 3
    trainer = _trainer(tmp_path, log_every_n_steps=5)
    with pytest.warns(UserWarning, match=r"non-finite") as record:
        trainer.fit(model, tiny_loaders()[0])
    messages = [str(w.message) for w in record if "non-finite" in str(w.message)]
    assert len(messages) == 1, messages
    assert "at step 19 (epoch 1, batch 3)" in messages[0]
    assert "on_nonfinite_loss='raise'" in messages[0] and "detect_anomaly=True" in messages[0]
    assert trainer.global_step == 32  # warn trains on


def test_warn_is_silent_for_finite_losses_and_checks_at_the_end(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        _trainer(tmp_path, max_epochs=1).fit(TinyClassifier(), tiny_loaders()[0])
    # A bad loss in the last, unfinished window (log_every_n_steps larger than the run) is still reported.
    with pytest.warns(UserWarning, match=r"at step 2 \(epoch 0, batch 2\)"):
        _trainer(tmp_path, max_epochs=1, log_every_n_steps=1000).fit(Diverging({2}), tiny_loaders()[0])


def test_raise_stops_before_the_step_and_keeps_the_last_good_checkpoint(tmp_path: Path) -> None:
    model = Diverging({20})
    trainer = _trainer(tmp_path, on_nonfinite_loss="raise", enable_checkpointing=True)
    with pytest.raises(NonFiniteLossError, match=r"at step 20 \(epoch 1, batch 4\)") as info:
        trainer.fit(model, tiny_loaders()[0])
    assert "detect_anomaly=True" in str(info.value)
    assert trainer.global_step == 20
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(p.grad is None for p in model.parameters())  # the bad loss never reached backward
    saved = sorted(p.name for p in (tmp_path / "checkpoints").glob("*.ckpt"))
    assert saved == ["epoch=0-step=16.ckpt", "last.ckpt"]
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert all(torch.isfinite(v).all() for v in state["state_dict"].values())


def test_skip_skips_exactly_the_bad_steps(tmp_path: Path) -> None:
    model = Diverging({3, 7})
    trainer = _trainer(tmp_path, max_epochs=1, on_nonfinite_loss="skip")
    with pytest.warns(UserWarning, match=r"'skip'.*at step 3 \(epoch 0, batch 3\)"):
        trainer.fit(model, tiny_loaders()[0])
    assert all(torch.isfinite(p).all() for p in model.parameters())
    # A skipped batch is not an optimizer step: 16 batches, 2 skipped (batch 7 ran at step 6).
    assert trainer.global_step == 14


def test_detect_anomaly_names_the_backward_operation(tmp_path: Path) -> None:
    class SqrtOfNegative(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return super().training_step(batch, batch_idx) + (self.net[0].weight.sum() * 0 - 1).sqrt()

    trainer = _trainer(tmp_path, max_epochs=1, detect_anomaly=True)
    with pytest.raises(RuntimeError, match=r"SqrtBackward"), warnings.catch_warnings(action="ignore"):
        trainer.fit(SqrtOfNegative(), tiny_loaders()[0])
    assert not torch.is_anomaly_enabled()


def test_mode_is_checked_before_anything_starts() -> None:
    for make in (lambda: Trainer(accelerator="cpu", on_nonfinite_loss="ignore"),  # type: ignore[arg-type]
                 lambda: Engine(accelerator="cpu", on_nonfinite_loss="ignore")):  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=re.escape("on_nonfinite_loss='ignore'")) as info:
            make()
        assert "'raise'" in str(info.value) and "Fix:" in str(info.value)


def _engine_run(mode: str, bad: set[int]) -> tuple[torch.nn.Module, torch.optim.Optimizer, list[int]]:
    torch.manual_seed(0)
    engine = Engine(accelerator="cpu", devices=1, on_nonfinite_loss=mode)  # type: ignore[arg-type]
    net = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    model, opt = engine.setup(net, opt)
    loader = engine.setup_dataloaders(tiny_loaders(shuffle=False)[0])
    steps: list[int] = []
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if i in bad:
            loss = loss * math.inf
        opt.zero_grad()
        engine.backward(loss)
        before = [p.detach().clone() for p in net.parameters()]
        opt.step()
        if any(not torch.equal(b, p) for b, p in zip(before, net.parameters(), strict=True)):
            steps.append(i)
    engine._finish()
    return net, opt, steps


def test_engine_skip_skips_the_optimizer_step_even_with_momentum() -> None:
    with pytest.warns(UserWarning, match=r"'skip'.*at step 5 \(epoch 0, batch 5\)"):
        net, _, steps = _engine_run("skip", {5, 9})
    assert 5 not in steps and 9 not in steps and len(steps) == 14
    assert all(torch.isfinite(p).all() for p in net.parameters())


def test_engine_raise_and_warn() -> None:
    with pytest.raises(NonFiniteLossError, match=r"at step 4 \(epoch 0, batch 4\)"):
        _engine_run("raise", {4})
    with pytest.warns(UserWarning, match=r"at step 6 \(epoch 0, batch 6\)"):
        net, _, _ = _engine_run("warn", {6})
    assert not all(torch.isfinite(p).all() for p in net.parameters())


def test_the_accelerator_window_names_the_first_bad_loss_in_it() -> None:
    # On an accelerator the losses are kept and checked together (no per-step sync); this machine has only CPUs, so
    # the window is filled directly with the entries the check would have kept.
    from xtrain.core._internal.nonfinite import NonFiniteCheck

    check = NonFiniteCheck("warn", every=50)
    good, bad = torch.tensor(1.0), torch.tensor(math.inf)
    check._window = [(good, 10, 0, 10), (bad, 11, 0, 11), (bad, 12, 1, 0)]
    with pytest.warns(UserWarning, match=r"loss=inf\) at step 11 \(epoch 0, batch 11\)"):
        check.flush()
    assert check.found == "at step 11 (epoch 0, batch 11)"
