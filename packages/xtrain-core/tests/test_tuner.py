"""The tuners: the learning-rate range test and the batch-size finder, and that both leave the model and the
optimizer exactly as they were."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from tuner_helpers import Budgeted
from xtrain.core import ConfigError, Trainer
from xtrain.core.tuner import Tuner


def _trained(module: Budgeted) -> Trainer:
    trainer = Trainer(accelerator="cpu", max_steps=3, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module)
    return trainer


def _snapshot(module: torch.nn.Module, trainer: Trainer) -> dict[str, Any]:
    return {"tensors": {k: v.clone() for k, v in module.state_dict().items()},
            "objects": [id(p) for p in module.parameters()],
            "flags": [(p.requires_grad, p.dtype, p.device) for p in module.parameters()],
            "training": [m.training for m in module.modules()],
            "optimizer": copy.deepcopy(trainer.optimizers[0].state_dict())}


def _assert_same(before: dict[str, Any], module: torch.nn.Module, trainer: Trainer) -> None:
    after = _snapshot(module, trainer)
    assert before["tensors"].keys() == after["tensors"].keys()
    for key, value in before["tensors"].items():
        assert torch.equal(value, after["tensors"][key]), f"{key} changed"
    assert before["objects"] == after["objects"] and before["flags"] == after["flags"]
    assert before["training"] == after["training"]
    saved, now = before["optimizer"], after["optimizer"]
    assert saved["param_groups"] == now["param_groups"]
    assert saved["state"].keys() == now["state"].keys()
    for index, state in saved["state"].items():
        assert torch.equal(state["momentum_buffer"], now["state"][index]["momentum_buffer"])
    assert module._trainer is trainer


def test_lr_find_suggests_a_rate_plots_it_and_leaves_everything_as_it_was(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = Budgeted(n=128, shuffle=True, batch_size=4, lr=0.05, momentum=0.9)
    module.batch_size = 32  # batches large enough for a smooth curve
    trainer = _trained(module)
    before = _snapshot(module, trainer)
    result = Tuner(trainer).lr_find(module, min_lr=1e-4, max_lr=10.0, num_training=40, update_attr=False)
    _assert_same(before, module, trainer)
    assert 10 < len(result.lrs) <= 40 and len(result.lrs) == len(result.losses)
    assert result.lrs == sorted(result.lrs) and result.lrs[0] == pytest.approx(1e-4)
    suggestion = result.suggestion()
    assert suggestion is not None and 1e-4 < suggestion < 10.0
    path = tmp_path / "lr.png"
    result.plot(path=path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_lr_find_follows_lightnings_schedule_smoothing_and_suggestion() -> None:
    """Lightning 2.6's range test, measured side by side on one model: rates 1e-5, 1.585e-5, 1.995e-5 (its second
    step skips 1e-5 * 10**0.1), first smoothed losses bias-corrected by beta**(step + 1), and the suggestion the
    steepest slope against the rate itself; xtrain suggested 5.4e-4 where Lightning suggests 1.26e-4."""
    from xtrain.core.tuner import LRFinder

    finder = LRFinder(min_lr=1e-5, max_lr=1.0, num_training=50, mode="exponential")
    assert [finder.lr_at(k) for k in range(3)] == pytest.approx([1e-05, 1e-5 * 10 ** 0.2, 1e-5 * 10 ** 0.3])
    finder.lrs = [finder.lr_at(k) for k in range(20)]
    finder.losses = [2.0 - 0.01 * k for k in range(20)]  # a straight fall: steepest against the smallest rates
    assert finder.suggestion() == finder.lrs[10] and finder.results == {"lr": finder.lrs, "loss": finder.losses}
    finder.losses[12] = float("nan")  # skipped, and the index still names the right rate
    assert finder.suggestion(skip_begin=12) == finder.lrs[13]


def test_lr_find_updates_the_learning_rate_hyperparameter() -> None:
    torch.manual_seed(0)
    module = Budgeted(n=128, shuffle=True, batch_size=4, lr=0.05, momentum=0.9)
    trainer = _trained(module)
    result = Tuner(trainer).lr_find(module, min_lr=1e-4, max_lr=1.0, num_training=20, early_stop_threshold=None)
    assert len(result.lrs) == 20 and not result.stopped_early
    assert module.hparams["lr"] == result.suggestion()
    with pytest.raises(ConfigError, match="min_lr"):
        Tuner(trainer).lr_find(module, min_lr=1.0, max_lr=0.1)


@pytest.mark.parametrize(("mode", "expected", "trials"), [("power", 32, [2, 4, 8, 16, 32, 64]),
                                                          # 48 fits; Lightning's default margin of 5% takes it to 45
                                                          ("binsearch", 45, [2, 4, 8, 16, 32, 64, 48, 56, 52, 50, 49])])
def test_scale_batch_size_under_a_memory_budget(mode: str, expected: int, trials: list[int]) -> None:
    module = Budgeted(n=128, shuffle=True, batch_size=4, lr=0.05, momentum=0.9)
    trainer = _trained(module)
    before = _snapshot(module, trainer)
    module.budget, module.sizes = 48, []
    found = Tuner(trainer).scale_batch_size(module, mode=mode, steps_per_trial=1)  # type: ignore[arg-type]
    assert found == expected and module.batch_size == expected
    assert list(dict.fromkeys(module.sizes)) == trials
    module.batch_size = 4
    _assert_same(before, module, trainer)


def test_scale_batch_size_stops_when_one_batch_holds_the_data() -> None:
    module = Budgeted(n=128, shuffle=True, batch_size=4, lr=0.05, momentum=0.9)
    trainer = _trained(module)
    assert Tuner(trainer).scale_batch_size(module, init_val=16, steps_per_trial=1) == 128
    module.budget = 0  # not even one sample fits (a budget of 1 falls back to 1, as Lightning's)
    with pytest.raises(ConfigError, match="batch_size=1"):
        Tuner(trainer).scale_batch_size(module, init_val=2, steps_per_trial=1)
    with pytest.raises(ConfigError, match="batch_arg_name"):
        Tuner(trainer).scale_batch_size(module, batch_arg_name="bs")
