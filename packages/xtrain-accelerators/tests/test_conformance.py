"""Every accelerator and XLA strategy of this package passes core's conformance kit.

Off the hardware, the parts of the kit that need no device run (declared data, registration, ``devices=`` rules and
resolution with simulated counts); the rest skips saying which accelerator is missing. In the ``xla`` nox session
(``PJRT_DEVICE=CPU``) the XLA classes run everything for real, and on a GPU machine the CUDA class does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typing_extensions import override

from xtrain.accelerators._internal.xla_runtime import pjrt_device
from xtrain.accelerators.cuda import CUDAAccelerator
from xtrain.accelerators.mps import MPSAccelerator
from xtrain.accelerators.xla import XLAAccelerator
from xtrain.accelerators.xpu import XPUAccelerator
from xtrain.core.testing import AcceleratorConformance, StrategyConformance


@pytest.mark.gpu
class TestCUDAAccelerator(AcceleratorConformance):
    accelerator = CUDAAccelerator


class TestMPSAccelerator(AcceleratorConformance):
    accelerator = MPSAccelerator


class TestXPUAccelerator(AcceleratorConformance):
    accelerator = XPUAccelerator


@pytest.mark.xla
class TestXLAAccelerator(AcceleratorConformance):
    accelerator = XLAAccelerator


@pytest.mark.xla
class TestSingleXLAStrategy(StrategyConformance):
    strategy = "single_xla"
    accelerator = "xla"


@pytest.mark.xla
class TestXLAStrategyOneDevice(StrategyConformance):
    """The multi-process strategy with one worker: its launcher, rank plumbing and XLA collectives, for real."""

    strategy = "xla"
    accelerator = "xla"

    @pytest.fixture(autouse=True)
    def _one_device(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("CPU_NUM_DEVICES", "1")


@pytest.mark.xla
class TestXLAStrategyEveryDevice(StrategyConformance):
    """One process per device with real collectives between them: TPU hosts only."""

    strategy = "xla"
    accelerator = "xla"
    devices = -1

    @override
    def test_trains_and_collectives_agree(self, tmp_path: Path) -> None:
        if XLAAccelerator.is_available() and pjrt_device() != "TPU":
            pytest.skip("multi-process XLA collectives abort on XLA's CPU client (pytorch/xla#9089); "
                        "this runs where PJRT_DEVICE is TPU")
        super().test_trains_and_collectives_agree(tmp_path)


@pytest.mark.xla
class TestXLASPMDStrategy(StrategyConformance):
    """SPMD data parallel over two XLA CPU devices in one process."""

    strategy = "xla_spmd"
    accelerator = "xla"
    devices = -1

    @pytest.fixture(autouse=True)
    def _two_devices(self, monkeypatch: pytest.MonkeyPatch) -> None:
        if pjrt_device() == "CPU":
            monkeypatch.setenv("CPU_NUM_DEVICES", "2")
