"""``devices=`` for every accelerator of this package, with the device count simulated (the one allowed double).

Every accelerator uses core's one rule, so these tables are the same for each: an int is a count, a list or a
comma string is indices, -1/"-1" is all, "auto" is all, and "2" is refused because it reads as a count or an index.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from xtrain.accelerators.cuda import CUDAAccelerator
from xtrain.accelerators.mps import MPSAccelerator
from xtrain.accelerators.xla import XLAAccelerator
from xtrain.accelerators.xpu import XPUAccelerator
from xtrain.core.accelerator import Accelerator
from xtrain.core.errors import ConfigError
from xtrain.core.testing import simulate_devices

ACCELERATORS = [CUDAAccelerator, MPSAccelerator, XPUAccelerator, XLAAccelerator]

ACCEPTED: list[tuple[Any, list[int]]] = [
    (1, [0]), (2, [0, 1]), (4, [0, 1, 2, 3]), (-1, [0, 1, 2, 3]), ("-1", [0, 1, 2, 3]), (" -1 ", [0, 1, 2, 3]),
    ("auto", [0, 1, 2, 3]), ("AUTO", [0, 1, 2, 3]), ([0], [0]), ([3], [3]), ([1, 3], [1, 3]), ([3, 1], [3, 1]),
    ((0, 2), [0, 2]), ("0,1", [0, 1]), ("3,", [3]), (" 1 , 2 ", [1, 2]), ("0,1,2,3", [0, 1, 2, 3]),
]

REJECTED: list[tuple[Any, str, str]] = [
    (0, "positive count", "devices=1"),
    (-2, "positive count", "devices=-1"),
    ([], "is empty", "devices=1"),
    ((), "is empty", "devices=1"),
    (True, "must not be a bool", "devices=1"),
    (False, "must not be a bool", "devices=1"),
    (1.0, "must not be a float", "devices=1"),
    (2.5, "must not be a float", "devices=1"),
    ("2", "ambiguous", r"write devices=2 for 2 device(s), or devices=[2]"),
    ("0", "ambiguous", "devices=[0]"),
    ([0, 0], "more than once", "devices=[0]"),
    ([1, 2, 1], "more than once", "devices=[1, 2]"),
    ([-1], "negative", "indices start at 0"),
    (["0"], "int device indices", "devices=[0, 1]"),
    ([0.0], "int device indices", "devices=[0, 1]"),
    ([True], "int device indices", "devices=[0, 1]"),
    ("a,b", "comma-separated", "devices='0,1'"),
    (",", "comma-separated", "devices='0,1'"),
    ("gpu", "not a valid spelling", "devices=1"),
    (None, "unsupported type", "devices=1"),
    ({0: 1}, "unsupported type", "devices=1"),
    (5, "this machine has 4", "devices=4 or fewer"),
    ([4], "index(es) [4]", "choose among [0, 1, 2, 3]"),
    ([0, 7], "index(es) [7]", "choose among [0, 1, 2, 3]"),
    ("0,4", "index(es) [4]", "choose among [0, 1, 2, 3]"),
]


@pytest.mark.parametrize("accelerator", ACCELERATORS, ids=lambda a: a.name)
@pytest.mark.parametrize(("devices", "expected"), ACCEPTED, ids=repr)
def test_accepted_spellings(accelerator: type[Accelerator], devices: Any, expected: list[int]) -> None:
    with simulate_devices(accelerator, 4):
        assert accelerator.parse_devices(devices) == expected
        assert [accelerator().get_device(i) for i in expected] == [
            torch.device(accelerator.device_type, i) for i in expected]


@pytest.mark.parametrize("accelerator", ACCELERATORS, ids=lambda a: a.name)
@pytest.mark.parametrize(("devices", "problem", "fix"), REJECTED, ids=repr)
def test_rejected_spellings_say_what_to_write(accelerator: type[Accelerator], devices: Any, problem: str,
                                              fix: str) -> None:
    with simulate_devices(accelerator, 4), pytest.raises(ConfigError) as info:
        accelerator.parse_devices(devices)
    message = str(info.value)
    assert message.startswith(f"devices={devices!r}:"), message
    assert problem in message, message
    assert fix in message.split("Fix:", 1)[1], message
    if problem.startswith(("this machine", "index")):
        assert accelerator.name in message, "the message names the accelerator whose devices are missing"


@pytest.mark.parametrize("accelerator", ACCELERATORS, ids=lambda a: a.name)
def test_without_devices_every_count_and_index_is_missing(accelerator: type[Accelerator]) -> None:
    with simulate_devices(accelerator, 0):
        assert not accelerator.is_available()
        for devices in (1, [0], "0,1"):
            with pytest.raises(ConfigError, match=r"this machine has|indices \[\]"):
                accelerator.parse_devices(devices)


def test_the_simulation_is_undone() -> None:
    before = (CUDAAccelerator.is_available(), CUDAAccelerator.device_count())
    with simulate_devices(CUDAAccelerator, 3):
        assert CUDAAccelerator.device_count() == 3 and CUDAAccelerator.is_available()
    assert (CUDAAccelerator.is_available(), CUDAAccelerator.device_count()) == before
    assert "device_count" in CUDAAccelerator.__dict__ and "is_available" in CUDAAccelerator.__dict__
