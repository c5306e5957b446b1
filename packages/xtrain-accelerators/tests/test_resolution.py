"""How the validator resolves this package's accelerators: auto-selection, errors, and the strategy's device.

Availability is simulated where the hardware is missing (the one allowed double); everything else is real: the
entry points of the installed distribution, core's validator, and a third-party accelerator installed as a
distribution for the test.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import pytest
import torch
from torch import nn

from xtrain.accelerators.cuda import CUDAAccelerator
from xtrain.accelerators.mps import MPSAccelerator
from xtrain.accelerators.xla import XLAAccelerator
from xtrain.accelerators.xpu import XPUAccelerator
from xtrain.core import ConfigError, Trainer
from xtrain.core._internal.resolve import resolve
from xtrain.core.accelerator import Accelerator
from xtrain.core.parallel import ParallelStrategy
from xtrain.core.precision import Precision
from xtrain.core.registry import ACCELERATORS, STRATEGIES
from xtrain.core.testing import simulate_devices

TOY = '''
import torch
from xtrain.core.accelerator import Accelerator

class ToyAccelerator(Accelerator):
    """A third-party accelerator whose one device is the meta device."""
    name = "toy"
    device_type = "meta"
    dist_backend = None
    auto_priority = {priority}

    @classmethod
    def is_available(cls): return True

    @classmethod
    def device_count(cls): return 1
'''


class DoubleToy(Precision):
    """A real 64-bit precision plugin, passed as an instance (xtrain-precision is not installed here)."""

    name = "64-true"
    param_dtype = torch.float64

    def convert_module(self, module: nn.Module) -> nn.Module:
        return module.double()

    def forward_context(self) -> Any:
        from contextlib import nullcontext

        return nullcontext()


def _really_available() -> list[str]:
    return [n for n in ACCELERATORS.names() if isinstance(ACCELERATORS.load(n), type)
            and ACCELERATORS.load(n).is_available()]


FIRST_PARTY: list[type[Accelerator]] = [CUDAAccelerator, MPSAccelerator, XPUAccelerator, XLAAccelerator]


def _only(stack: ExitStack, available: dict[type[Accelerator], int]) -> None:
    """Simulate exactly ``available`` among this package's accelerators; the others have no device."""
    for acc in FIRST_PARTY:
        stack.enter_context(simulate_devices(acc, available.get(acc, 0)))


# -- auto-selection ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("simulated", "expected"), [
    ([CUDAAccelerator], "cuda"),
    ([XPUAccelerator], "xpu"),
    ([MPSAccelerator], "mps"),
    ([XLAAccelerator], "xla"),
    ([CUDAAccelerator, XPUAccelerator], "cuda"),
    ([MPSAccelerator, XPUAccelerator], "mps"),
    ([CUDAAccelerator, XLAAccelerator], "xla"),
    ([CUDAAccelerator, MPSAccelerator, XPUAccelerator, XLAAccelerator], "xla"),
    ([], "cpu"),
])
def test_auto_picks_the_available_accelerator_with_the_highest_priority(simulated: list[type[Accelerator]],
                                                                        expected: str) -> None:
    with ExitStack() as stack:
        _only(stack, dict.fromkeys(simulated, 2))
        chosen = resolve(accelerator="auto", devices=1).strategy
    assert chosen.accelerator.name == expected
    assert chosen.root_device.type == chosen.accelerator.device_type


@pytest.mark.parametrize(("priority", "expected"), [(100, "toy"), (10, "cuda"), (-5, "cuda")])
def test_a_third_party_accelerator_takes_part_by_its_declared_priority(installed_distribution: Any, priority: int,
                                                                       expected: str) -> None:
    installed_distribution("toy-accelerator", {"xtrain.accelerators": {"toy": "toy_accel:ToyAccelerator"}},
                           {"toy_accel": TOY.format(priority=priority)})
    assert ACCELERATORS.distribution_of("toy") == "toy-accelerator"
    with ExitStack() as stack:
        _only(stack, {CUDAAccelerator: 1})
        strategy = resolve(accelerator="auto", devices=1).strategy
    assert strategy.accelerator.name == expected
    expected_device = torch.device("meta", 0) if expected == "toy" else torch.device("cuda", 0)
    assert strategy.root_device == expected_device


def test_a_third_party_accelerator_with_one_device_runs_on_its_own_device(installed_distribution: Any) -> None:
    """Lightning #18902: there, a custom accelerator with one device got SingleDeviceStrategy('cpu')."""
    installed_distribution("toy-accelerator", {"xtrain.accelerators": {"toy": "toy_accel:ToyAccelerator"}},
                           {"toy_accel": TOY.format(priority=-5)})
    for strategy in ("auto", "single_device"):
        resolved = resolve(accelerator="toy", devices=1, strategy=strategy).strategy
        assert resolved.root_device == torch.device("meta", 0), strategy


# -- unavailable accelerators --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cuda", "gpu"])
def test_cuda_without_a_gpu_lists_the_available_accelerators(name: str) -> None:
    if CUDAAccelerator.is_available() or MPSAccelerator.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError) as info:
        Trainer(accelerator=name)
    err = info.value
    assert str(err).startswith(f"accelerator={name!r}: 'cuda' is not available on this machine.")
    assert err.choices is not None and set(err.choices) == set(_really_available())
    assert "'cpu'" in str(err) and "Fix: choose an available accelerator, e.g. accelerator=" in str(err)


@pytest.mark.parametrize("name", ["mps", "xpu"])
def test_other_missing_accelerators_are_refused_the_same_way(name: str) -> None:
    acc = ACCELERATORS.load(name)
    if acc.is_available():  # type: ignore[attr-defined]
        pytest.skip(f"this machine has {name}")
    with pytest.raises(ConfigError, match=rf"accelerator='{name}': '{name}' is not available on this machine\. "
                                          r".*Valid choices: .*'cpu'"):
        resolve(accelerator=name)


# -- the strategy's device comes from the accelerator --------------------------------------------------------------
@pytest.mark.parametrize(("devices", "index"), [(1, 0), ([0], 0), ([2], 2), ("3,", 3)])
def test_single_device_with_cuda_runs_on_cuda(devices: Any, index: int) -> None:
    with simulate_devices(CUDAAccelerator, 4):
        trainer = Trainer(accelerator="cuda", strategy="single_device", devices=devices, logger=False,
                          enable_checkpointing=False, enable_progress_bar=False)
    assert trainer.strategy.root_device == torch.device("cuda", index)
    assert trainer.strategy.accelerator.dist_backend == "nccl"
    assert trainer.strategy.precision.device_type == "cuda", "autocast must target the accelerator's device type"


def test_gpu_resolves_to_cuda_and_keeps_the_real_name() -> None:
    with ExitStack() as stack:
        _only(stack, {CUDAAccelerator: 2})
        strategy = resolve(accelerator="gpu", devices=1).strategy
    assert type(strategy.accelerator) is CUDAAccelerator and strategy.accelerator.name == "cuda"
    assert strategy.root_device == torch.device("cuda", 0)


def test_gpu_resolves_to_mps_where_apple_gpus_are() -> None:
    with simulate_devices(MPSAccelerator, 1), simulate_devices(CUDAAccelerator, 0):
        strategy = resolve(accelerator="gpu", devices=1).strategy
    assert type(strategy.accelerator) is MPSAccelerator and strategy.root_device == torch.device("mps", 0)


# -- capabilities declared as data --------------------------------------------------------------------------------
def test_xla_refuses_strategies_it_does_not_declare() -> None:
    with simulate_devices(XLAAccelerator, 1), pytest.raises(ConfigError) as info:
        resolve(accelerator="xla", strategy="single_device")
    assert str(info.value).startswith("strategy='single_device': cannot run on accelerator='xla'.")
    assert set(info.value.choices or ()) == {"single_xla", "xla", "xla_spmd"}


def test_xla_with_ddp_is_a_clear_config_error() -> None:
    with simulate_devices(XLAAccelerator, 2), pytest.raises(ConfigError) as info:
        resolve(accelerator="xla", strategy="ddp", devices=2)
    if "ddp" in STRATEGIES:
        assert str(info.value).startswith("strategy='ddp': cannot run on accelerator='xla'.")
        assert "'xla_spmd'" in str(info.value)
    else:
        assert "Fix: pip install xtrain-strategies" in str(info.value)


def test_xla_strategies_refuse_other_accelerators() -> None:
    for name in ("single_xla", "xla", "xla_spmd"):
        with pytest.raises(ConfigError) as info:
            resolve(accelerator="cpu", strategy=name)
        assert str(info.value).startswith(f"accelerator='cpu': cannot run strategy={name!r}.")
        assert info.value.choices == ("xla",)


def test_mps_refuses_multi_process_strategies() -> None:
    class Par(ParallelStrategy):
        name = "par"

    with simulate_devices(MPSAccelerator, 1), pytest.raises(ConfigError, match=r"declares no torch\.distributed"):
        resolve(accelerator="mps", strategy=Par())


@pytest.mark.parametrize("accelerator", [MPSAccelerator, XLAAccelerator], ids=lambda a: a.name)
def test_float64_is_refused_where_the_hardware_has_none(accelerator: type[Accelerator]) -> None:
    with simulate_devices(accelerator, 1), pytest.raises(ConfigError) as info:
        resolve(accelerator=accelerator.name, precision=DoubleToy())
    assert str(info.value).startswith(f"precision='64-true': is not supported by accelerator={accelerator.name!r}.")
    assert "'32-true'" in str(info.value)


def test_cuda_accepts_every_precision() -> None:
    with simulate_devices(CUDAAccelerator, 1):
        strategy = resolve(accelerator="cuda", precision=DoubleToy()).strategy
    assert strategy.precision.name == "64-true" and strategy.precision.device_type == "cuda"


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"devices": 2}, "not a subset"),
    ({"devices": [1, 2, 3]}, "not a subset"),
    ({"devices": -1, "num_nodes": 2}, "one process on one host"),
])
def test_spmd_refuses_a_subset_of_devices_or_several_hosts(kwargs: dict[str, Any], fragment: str) -> None:
    with simulate_devices(XLAAccelerator, 4), pytest.raises(ConfigError, match=fragment):
        resolve(accelerator="xla", strategy="xla_spmd", **kwargs)


def test_spmd_takes_every_device_and_runs_on_the_virtual_device() -> None:
    with simulate_devices(XLAAccelerator, 4):
        strategy = resolve(accelerator="xla", strategy="xla_spmd", devices=-1).strategy
    assert strategy.parallel_devices == [torch.device("xla", i) for i in range(4)]
    assert strategy.root_device == torch.device("xla", 0) and strategy.world_size == 1
    assert strategy.launcher is None and strategy.distributed_sampler_kwargs is None


def test_multi_process_xla_refuses_a_subset_and_cpu_collectives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    with simulate_devices(XLAAccelerator, 4):
        with pytest.raises(ConfigError, match="cannot start a subset"):
            resolve(accelerator="xla", strategy="xla", devices=2)
        strategy = resolve(accelerator="xla", devices=-1).strategy
        assert strategy.name == "xla" and strategy.world_size == 4
        assert strategy.distributed_sampler_kwargs == {"num_replicas": 4, "rank": 0}
        assert strategy.launcher is not None and strategy.launcher.nprocs is None  # type: ignore[attr-defined]
        monkeypatch.setenv("PJRT_DEVICE", "CPU")
        with pytest.raises(ConfigError) as info:
            resolve(accelerator="xla", devices=-1)
    assert "pytorch/xla#9089" in str(info.value) and "strategy='xla_spmd'" in str(info.value)


def test_one_device_defaults_to_single_xla() -> None:
    with simulate_devices(XLAAccelerator, 4):
        strategy = resolve(accelerator="tpu", devices=[3]).strategy
    assert strategy.name == "single_xla" and strategy.root_device == torch.device("xla", 3)
    assert strategy.precision.device_type == "xla"


@pytest.mark.parametrize("accelerator", [CUDAAccelerator, MPSAccelerator, XPUAccelerator, XLAAccelerator])
def test_an_unavailable_builtin_accelerator_says_how_to_make_it_available(accelerator: type[Accelerator]) -> None:
    """Where a built-in is unavailable (CI: a CPU build of torch) it explains itself in the error for its name."""
    if accelerator.is_available():
        assert accelerator.unavailable_reason() is None
        pytest.skip(f"{accelerator.name} is available here")
    reason = accelerator.unavailable_reason()
    assert reason, f"{accelerator.name} gives no reason"
    if accelerator is CUDAAccelerator and not torch.backends.cuda.is_built():
        assert f"torch {torch.__version__} was built without CUDA; install a CUDA build of torch" in reason
    with pytest.raises(ConfigError) as info:
        resolve(accelerator=accelerator.name)
    message = str(info.value)
    assert message.startswith(f"accelerator={accelerator.name!r}: {accelerator.name!r} is not available on this "
                              f"machine. {reason}."), message
    assert message.endswith("Fix: choose an available accelerator, e.g. accelerator='cpu', or 'auto'; "
                            "or make it available as said.")
