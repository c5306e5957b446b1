from __future__ import annotations

from typing import Any

import pytest
import torch

from xtrain.core import ConfigError, Trainer
from xtrain.core._internal.resolve import canonical_precision, resolve
from xtrain.core.defaults import CPUAccelerator, LocalEnvironment, SingleDeviceStrategy, SinglePrecision
from xtrain.core.defaults.torch_io import TorchCheckpointIO

ONE_DEVICE_ACCEL = '''
import torch
from xtrain.core.accelerator import Accelerator

class MetaAccelerator(Accelerator):
    """An accelerator whose one device is the meta device."""
    name = "metadev"
    device_type = "meta"
    dist_backend = None
    auto_priority = -5

    @classmethod
    def is_available(cls): return True

    @classmethod
    def device_count(cls): return 1
'''


def test_defaults_resolve_to_cpu_single_device_32_true() -> None:
    resolved = resolve()
    s = resolved.strategy
    assert isinstance(s, SingleDeviceStrategy) and isinstance(s.accelerator, CPUAccelerator)
    assert isinstance(s.precision, SinglePrecision) and isinstance(s.checkpoint_io, TorchCheckpointIO)
    assert isinstance(s.cluster_environment, LocalEnvironment)
    assert s.root_device == torch.device("cpu") and resolved.num_devices == 1


def test_the_strategys_device_comes_from_the_accelerator(installed_distribution: Any) -> None:
    """Lightning #18902: a custom accelerator with one device got SingleDeviceStrategy(cpu). Here it cannot."""
    installed_distribution("meta-accel", {"xtrain.accelerators": {"metadev": "meta_accel:MetaAccelerator"}},
                           {"meta_accel": ONE_DEVICE_ACCEL})
    for strategy in ("auto", "single_device"):
        s = resolve(accelerator="metadev", devices=1, strategy=strategy).strategy
        assert s.root_device == torch.device("meta", 0)


def test_auto_prefers_the_highest_priority_available_accelerator(installed_distribution: Any) -> None:
    installed_distribution("meta-accel", {"xtrain.accelerators": {"metadev": "meta_accel:MetaAccelerator"}},
                           {"meta_accel": ONE_DEVICE_ACCEL})
    assert resolve().strategy.accelerator.name == "cpu"  # priority 0 beats -5


def test_multi_device_strategies_need_a_collective_backend(installed_distribution: Any) -> None:
    installed_distribution("meta-accel", {"xtrain.accelerators": {"metadev": "meta_accel:MetaAccelerator"}},
                           {"meta_accel": ONE_DEVICE_ACCEL})

    from xtrain.core.parallel import ParallelStrategy

    class Par(ParallelStrategy):
        name = "par"

    with pytest.raises(ConfigError, match=r"declares no torch\.distributed backend"):
        resolve(accelerator="metadev", strategy=Par())


@pytest.mark.parametrize(("kwargs", "argument", "fragment"), [
    ({"accelerator": "nope"}, "accelerator", "not a registered accelerator name"),
    ({"accelerator": 3}, "accelerator", "must be a registered name"),
    ({"strategy": "nope"}, "strategy", "not a registered strategy name"),
    ({"strategy": object()}, "strategy", "must be a registered name"),
    ({"precision": "12"}, "precision", "not a registered precision name"),
    ({"precision": 12}, "precision", "not a registered precision name"),
    ({"precision": True}, "precision", "not a registered precision name"),
    ({"num_nodes": 0}, "num_nodes", "positive int"),
    ({"num_nodes": -1}, "num_nodes", "positive int"),
    ({"num_nodes": 1.5}, "num_nodes", "positive int"),
    ({"plugins": [object()]}, "plugins", "is not a plugin"),
    ({"plugins": "nope"}, "plugins", "not a registered precision"),
    ({"plugins": [SinglePrecision(), SinglePrecision()]}, "plugins", "more than one Precision"),
    ({"plugins": [TorchCheckpointIO(), TorchCheckpointIO()]}, "plugins", "more than one CheckpointIO"),
    ({"plugins": [LocalEnvironment(), LocalEnvironment()]}, "plugins", "more than one ClusterEnvironment"),
    ({"precision": "32-true", "plugins": SinglePrecision()}, "precision", "also as plugins"),
    ({"strategy": SingleDeviceStrategy(accelerator=CPUAccelerator()), "accelerator": "cpu"}, "accelerator",
     "also inside strategy"),
    ({"strategy": SingleDeviceStrategy(precision=SinglePrecision()), "precision": "32-true"}, "precision",
     "also inside strategy"),
    ({"strategy": SingleDeviceStrategy(checkpoint_io=TorchCheckpointIO()), "plugins": TorchCheckpointIO()},
     "plugins", "strategy="),
    ({"strategy": SingleDeviceStrategy(cluster_environment=LocalEnvironment()), "plugins": LocalEnvironment()},
     "plugins", "strategy="),
    ({"strategy": "single_device", "devices": 2}, "devices", "more than strategy='single_device' drives"),
    ({"devices": 0}, "devices", "positive count"),
])
def test_invalid_hardware_arguments_fail_before_anything_starts(kwargs: dict[str, Any], argument: str,
                                                                 fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        Trainer(**kwargs)
    message = str(info.value)
    assert message.startswith(f"{argument}="), message
    assert fragment in message
    assert "Fix:" in message


@pytest.mark.parametrize(("given", "canonical", "warns"), [
    (None, "32-true", False), (32, "32-true", False), ("32", "32-true", False), (64, "64-true", False),
    ("64", "64-true", False), (16, "16-mixed", True), ("16", "16-mixed", True), ("bf16", "bf16-mixed", True),
    ("BF16-Mixed", "bf16-mixed", False),
])
def test_legacy_precision_spellings(given: object, canonical: str, warns: bool) -> None:
    if warns:
        with pytest.warns(UserWarning, match=f"means precision={canonical!r}"):
            assert canonical_precision(given) == canonical
    else:
        assert canonical_precision(given) == canonical
