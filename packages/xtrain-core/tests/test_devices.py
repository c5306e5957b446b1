from __future__ import annotations

import pytest

from xtrain.core._internal.devices import parse_device_indices
from xtrain.core.errors import ConfigError


def parse(devices: object, available: int = 4, limit: bool = True) -> list[int]:
    return parse_device_indices(devices, available=available, auto_count=available, accelerator="cuda",
                                limit_to_available=limit)


@pytest.mark.parametrize(("devices", "expected"), [
    (1, [0]), (3, [0, 1, 2]), (-1, [0, 1, 2, 3]), ("-1", [0, 1, 2, 3]), ("auto", [0, 1, 2, 3]),
    ([2], [2]), ([0, 3], [0, 3]), ((1, 2), [1, 2]), ("0,2", [0, 2]), ("2,", [2]), (" 1, 3 ", [1, 3]),
])
def test_accepted_spellings(devices: object, expected: list[int]) -> None:
    assert parse(devices) == expected


@pytest.mark.parametrize(("devices", "fragment"), [
    (0, "positive count"), (-2, "positive count"), ([], "is empty"), (True, "must not be a bool"),
    (1.0, "must not be a float"), (0.5, "must not be a float"), ("2", "ambiguous"), ("0", "ambiguous"),
    ([0, 0], "more than once"), ([1, 1, 2], "more than once"), ([0, 9], "index(es) [9]"), (5, "this machine has 4"),
    (["0"], "int device indices"), ([True], "int device indices"), ("a,b", "comma-separated"), ("x", "not a valid"),
    ([-1], "negative"), (None, "unsupported type"), ({"a": 1}, "unsupported type"),
])
def test_rejected_spellings_name_the_argument_and_fix(devices: object, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(devices)
    message = str(info.value)
    assert message.startswith(f"devices={devices!r}:")
    assert fragment in message
    assert "Fix:" in message


def test_the_two_lightning_spellings_get_one_rule() -> None:
    """'2' (a count in Lightning) is refused with both readings spelled out; '2,' (an index there) is an index."""
    with pytest.raises(ConfigError, match=r"write devices=2 .* or devices=\[2\]"):
        parse("2")
    assert parse("2,") == [2]


def test_cpu_processes_are_not_limited_by_core_count() -> None:
    assert parse(8, available=2, limit=False) == list(range(8))
    assert parse([0, 5], available=2, limit=False) == [0, 5]
