"""Core's own defaults pass the conformance kit that third parties use."""

from __future__ import annotations

import torch

from xtrain.core.defaults import CPUAccelerator
from xtrain.core.testing import AcceleratorConformance, PrecisionConformance, StrategyConformance


class TestCPUAccelerator(AcceleratorConformance):
    accelerator = CPUAccelerator


class TestSingleDeviceStrategy(StrategyConformance):
    strategy = "single_device"


class TestSinglePrecision(PrecisionConformance):
    precision = "32-true"
    expected_param_dtype = torch.float32
    expected_activation_dtype = torch.float32
