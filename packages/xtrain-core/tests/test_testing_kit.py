"""The kit's test doubles and the accelerator contract additions that accelerator packages rely on."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from torch.utils.data import DataLoader

from xtrain.core import ConfigError, Trainer
from xtrain.core._internal.hints import install_hint
from xtrain.core._internal.resolve import resolve
from xtrain.core.defaults import CPUAccelerator
from xtrain.core.registry import ACCELERATORS, STRATEGIES
from xtrain.core.testing import TinyClassifier, installed_distribution, simulate_devices, tiny_dataset


class InheritsEverything(CPUAccelerator):
    """Declares no ``is_available``/``device_count`` of its own: the double must not leave any behind."""

    name: ClassVar[str] = "inherits"


def test_simulate_devices_patches_and_restores_own_and_inherited_methods() -> None:
    with simulate_devices(CPUAccelerator, 0):
        assert not CPUAccelerator.is_available() and CPUAccelerator.device_count() == 0
        assert not CPUAccelerator().is_available(), "instances see the simulated availability too"
    assert CPUAccelerator.is_available() and CPUAccelerator.device_count() >= 1
    with simulate_devices(InheritsEverything, 3):
        assert InheritsEverything.device_count() == 3
        assert CPUAccelerator.device_count() == (os.cpu_count() or 1), "the parent class is left alone"
    assert "device_count" not in InheritsEverything.__dict__ and "is_available" not in InheritsEverything.__dict__


def test_an_unavailable_accelerator_with_nothing_else_available_is_still_a_config_error() -> None:
    """The error lists what is available; with nothing available it must not crash while wording the fix."""
    others = [n for n in ACCELERATORS.names() if n != "cpu" and isinstance(ACCELERATORS.load(n), type)
              and ACCELERATORS.load(n).is_available()]
    if others:
        pytest.skip(f"{others} are available here")
    with simulate_devices(CPUAccelerator, 0), pytest.raises(ConfigError) as info:
        resolve(accelerator="cpu")
    assert str(info.value) == ("accelerator='cpu': 'cpu' is not available on this machine. Valid choices: "
                               "(none installed). Fix: choose an available accelerator, or 'auto'.")


def test_installed_distribution_is_found_then_gone(tmp_path: Path) -> None:
    source = "from xtrain.core.defaults.cpu import CPUAccelerator\nclass Kit(CPUAccelerator):\n    name = 'kit'\n"
    with installed_distribution(tmp_path / "site", "kit-plugin", {"xtrain.accelerators": {"kit": "kit_mod:Kit"}},
                                {"kit_mod": source}) as root:
        assert ACCELERATORS.distribution_of("kit") == "kit-plugin"
        assert ACCELERATORS.create("kit").name == "kit"
        assert str(root) in sys.path
    assert "kit" not in ACCELERATORS.names() and "kit_mod" not in sys.modules
    assert str(tmp_path / "site") not in sys.path


class NoInferenceMode(CPUAccelerator):
    """A CPU accelerator declaring what XLA declares: its tensors cannot be inference tensors."""

    supports_inference_mode: ClassVar[bool] = False


@pytest.mark.parametrize(("accelerator", "expected"), [(CPUAccelerator(), True), (NoInferenceMode(), False)])
def test_evaluation_respects_the_accelerators_inference_mode_declaration(accelerator: Any, expected: bool) -> None:
    seen: list[tuple[bool, bool]] = []

    class Probe(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            seen.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled()))
            super().validation_step(batch, batch_idx)

    trainer = Trainer(accelerator=accelerator, inference_mode=True, logger=False, enable_progress_bar=False)
    trainer.validate(Probe(), DataLoader(tiny_dataset(32), batch_size=16))
    assert seen == [(expected, False), (expected, False)]


def test_xla_strategy_names_point_to_the_accelerators_package() -> None:
    for name in ("single_xla", "xla", "xla_spmd"):
        assert install_hint("xtrain.strategies", name) == "xtrain-accelerators[xla]"
    if "xla_spmd" not in STRATEGIES:
        assert "Fix: pip install 'xtrain-accelerators[xla]'" in str(STRATEGIES.unknown("xla_spmd"))
    assert "is provided by xtrain-accelerators" in str(STRATEGIES.unknown("xla_spmd"))
