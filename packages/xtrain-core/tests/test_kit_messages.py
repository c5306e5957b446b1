"""The conformance kit explains its failures: the contract rule, what it expected, what it saw.

Each test runs one kit check against a plugin with one defect, installed as a real distribution, and reads the
failure message the plugin's author would see.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from xtrain.core.defaults import CPUAccelerator
from xtrain.core.testing import AcceleratorConformance, PrecisionConformance, StrategyConformance

Install = Callable[..., Any]


def failure(check: Callable[[], None]) -> str:
    with pytest.raises(pytest.fail.Exception) as info:
        check()
    return str(info.value)


def test_a_precision_that_declares_half_but_computes_in_float32(installed_distribution: Install) -> None:
    source = ("from xtrain.core.defaults import SinglePrecision\n"
              "class Lazy(SinglePrecision):\n    name = 'lazy-half'\n")
    installed_distribution("lazy-half", {"xtrain.precision": {"lazy-half": "lazy_mod:Lazy"}}, {"lazy_mod": source})

    class Kit(PrecisionConformance):
        precision = "lazy-half"
        numerics_dtype = torch.bfloat16  # declared: rounds like bf16

    message = failure(Kit().test_numerics_follow_the_declared_dtypes)
    assert message.startswith("contract rule: the precision changes numerics as declared (torch.bfloat16)")
    assert "expected: relative error above float32's" in message and "seen:" in message
    assert "computed like float32" in message

    class WrongActivations(PrecisionConformance):
        precision = "lazy-half"
        expected_activation_dtype = torch.bfloat16

    message = failure(WrongActivations().test_numerics_follow_the_declared_dtypes)
    assert "contract rule: forward_context/convert_input compute in the declared activation dtype" in message
    assert "expected: a Linear output of torch.bfloat16" in message and "seen:     torch.float32" in message


def test_an_accelerator_that_accepts_ambiguous_devices(installed_distribution: Install) -> None:
    source = ("from xtrain.core.defaults.cpu import CPUAccelerator\n"
              "class Lax(CPUAccelerator):\n    name = 'lax'\n"
              "    @classmethod\n    def parse_devices(cls, devices):\n        return [0]\n")
    installed_distribution("lax-accel", {"xtrain.accelerators": {"lax": "lax_mod:Lax"}}, {"lax_mod": source})
    from lax_mod import Lax  # type: ignore[import-not-found]

    class Kit(AcceleratorConformance):
        accelerator = Lax

    message = failure(lambda: Kit().test_rejects_ambiguous_or_invalid_devices(True))
    assert "contract rule: Accelerator.parse_devices refuses invalid or ambiguous devices=" in message
    assert "expected: ConfigError for devices=True" in message and "seen:     accepted as [0]" in message


def test_an_accelerator_with_a_wrong_priority_type() -> None:
    class Odd(CPUAccelerator):
        name = "odd"
        auto_priority = None  # type: ignore[assignment]

    class Kit(AcceleratorConformance):
        accelerator = Odd

    message = failure(Kit().test_declares_capabilities_as_data)
    assert "contract rule: Accelerator class attributes are data of the documented types: auto_priority" in message
    assert "seen:     None" in message


def test_the_kit_judges_declared_data_by_the_registrys_rules() -> None:
    """A set of names works in the registry, so the kit accepts it too; a list is refused by both, naming it."""
    from xtrain.core._internal.plugin_checks import declared_data_problem

    class WithSet(CPUAccelerator):
        name = "with-set"
        supported_precisions = {"32-true"}  # type: ignore[assignment]

    class WithList(CPUAccelerator):
        name = "with-list"
        supported_precisions = ["32-true"]  # type: ignore[assignment]

    class SetKit(AcceleratorConformance):
        accelerator = WithSet

    class ListKit(AcceleratorConformance):
        accelerator = WithList

    SetKit().test_declares_capabilities_as_data()
    assert declared_data_problem("xtrain.accelerators", WithSet) is None
    message = failure(ListKit().test_declares_capabilities_as_data)
    assert "documented types: supported_precisions" in message and "seen:     ['32-true']" in message
    assert "supported_precisions = ['32-true']" in str(declared_data_problem("xtrain.accelerators", WithList))


def test_no_backward_sync_and_collective_judgements() -> None:
    """The judgement on the probe records (the records themselves come from real processes in the kit runs)."""
    kit = StrategyConformance()
    message = failure(lambda: kit._check_no_backward_sync([{"no_sync_grad_sum": 1.5}, {"no_sync_grad_sum": 1.5}]))
    assert "Strategy.no_backward_sync(True): backward passes inside it do not synchronize gradients" in message
    assert "seen:     gradient sums per rank [1.5, 1.5]" in message
    kit._check_no_backward_sync([{"no_sync_grad_sum": 1.5}, {"no_sync_grad_sum": 2.5}])
    kit._check_no_backward_sync([{"no_sync_grad_sum": None}, {"no_sync_grad_sum": None}])
    message = failure(lambda: kit._check_no_backward_sync([{"no_sync_error": "RuntimeError: x"}, {}]))
    assert "backward inside Strategy.no_backward_sync(True) works" in message and "RuntimeError: x" in message
