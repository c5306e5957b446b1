import torch

from xtrain.core.testing import PrecisionConformance


class TestSimulatedFP8(PrecisionConformance):
    precision = "fp8-sim"
    expected_param_dtype = torch.float32
    expected_activation_dtype = torch.float32  # the tensors are float32...
    numerics_dtype = torch.float8_e4m3fn  # ...whose values are rounded like fp8: the kit checks that
