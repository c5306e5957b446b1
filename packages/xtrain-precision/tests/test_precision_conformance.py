"""Every precision of this package passes the conformance kit third parties use."""

from __future__ import annotations

import torch

from xtrain.core.testing import PrecisionConformance


class TestDoublePrecision(PrecisionConformance):
    precision = "64-true"
    expected_param_dtype = torch.float64
    expected_activation_dtype = torch.float64


class TestFloat16MixedPrecision(PrecisionConformance):
    precision = "16-mixed"
    expected_param_dtype = torch.float32
    expected_activation_dtype = torch.float16


class TestBFloat16MixedPrecision(PrecisionConformance):
    precision = "bf16-mixed"
    expected_param_dtype = torch.float32
    expected_activation_dtype = torch.bfloat16


class TestFloat16TruePrecision(PrecisionConformance):
    precision = "16-true"
    expected_param_dtype = torch.float16
    expected_activation_dtype = torch.float16


class TestBFloat16TruePrecision(PrecisionConformance):
    precision = "bf16-true"
    expected_param_dtype = torch.bfloat16
    expected_activation_dtype = torch.bfloat16
