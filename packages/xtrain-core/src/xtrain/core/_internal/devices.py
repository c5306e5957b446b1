"""The one rule for reading ``devices=``, shared by every accelerator.

An int is a count, a list is indices, ``-1`` is all, ``"auto"`` is the accelerator's choice, and a string is a
comma-separated list of indices. A string without a comma (``"2"``) is refused because Lightning reads it as a count
while ``"2,"`` is an index; here the user writes ``2`` or ``[2]`` and nobody has to remember the difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeAlias

from xtrain.core.errors import ConfigError

__all__ = ["DevicesArg", "parse_device_indices"]

DevicesArg: TypeAlias = int | str | Sequence[int]

_SPELLINGS = "an int N (N devices), -1 (all), 'auto', a list of indices such as [0, 2], or a string of indices such as '0,2'"


def _refuse(devices: object, problem: str, fix: str) -> ConfigError:
    return ConfigError("devices", devices, problem, fix=fix)


def _indices_from_string(devices: str) -> list[int] | Literal["auto", "all"]:
    text = devices.strip().lower()
    if text == "auto":
        return "auto"
    if text == "-1":
        return "all"
    if "," not in text:
        if text.isdigit():
            raise _refuse(
                devices,
                "a string without a comma is ambiguous (a count or an index?).",
                f"write devices={int(text)} for {int(text)} device(s), or devices=[{int(text)}] for the device with "
                f"index {int(text)}.",
            )
        raise _refuse(devices, f"is not a valid spelling. Use {_SPELLINGS}.", "write devices=1 for one device.")
    parts = [p.strip() for p in text.split(",")]
    parts = [p for p in parts if p]
    if not parts or not all(p.isdigit() for p in parts):
        raise _refuse(devices, "must be comma-separated non-negative device indices.", "write e.g. devices='0,1'.")
    return [int(p) for p in parts]


def parse_device_indices(
    devices: object,
    *,
    available: int,
    auto_count: int,
    accelerator: str,
    limit_to_available: bool = True,
) -> list[int]:
    """Parse ``devices`` into a list of device indices for ``accelerator``.

    Args:
        devices: What the user passed.
        available: How many devices the machine has.
        auto_count: What ``"auto"`` means for this accelerator.
        accelerator: The accelerator's name, for messages.
        limit_to_available: Whether counts and indices must exist on this machine (False for CPU processes).

    Raises:
        ConfigError: For ``0``, ``[]``, floats, bools, duplicates, missing indices and ambiguous strings.
    """
    parsed: list[int] | Literal["auto", "all"]
    if isinstance(devices, (bool, float)):
        raise _refuse(devices, f"must not be a {type(devices).__name__}. Use {_SPELLINGS}.",
                      "write devices=1 for one device.")
    if isinstance(devices, int):
        if devices == -1:
            parsed = "all"
        elif devices <= 0:
            raise _refuse(devices, f"must be a positive count or -1 (all). Use {_SPELLINGS}.",
                          "write devices=1 for one device, or devices=-1 for all of them.")
        else:
            if limit_to_available and devices > available:
                raise _refuse(devices, f"asks for {devices} {accelerator} device(s) but this machine has {available}.",
                              f"write devices={available} or fewer (devices=-1 takes all of them).")
            return list(range(devices))
    elif isinstance(devices, str):
        parsed = _indices_from_string(devices)
    elif isinstance(devices, Sequence):
        if len(devices) == 0:
            raise _refuse(devices, "is empty.", "write devices=1 for one device, or list the indices, e.g. [0].")
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in devices):
            raise _refuse(devices, "a list must hold int device indices only.", "write e.g. devices=[0, 1].")
        parsed = [int(d) for d in devices]
    else:
        raise _refuse(devices, f"has an unsupported type {type(devices).__name__}. Use {_SPELLINGS}.",
                      "write devices=1 for one device.")

    if parsed == "auto":
        return list(range(auto_count))
    if parsed == "all":
        return list(range(max(available, 1)))
    if len(set(parsed)) != len(parsed):
        duplicates = sorted({d for d in parsed if parsed.count(d) > 1})
        raise _refuse(devices, f"lists device indices {duplicates} more than once.",
                      f"list each index once, e.g. devices={sorted(set(parsed))}.")
    negative = [d for d in parsed if d < 0]
    if negative:
        raise _refuse(devices, f"holds negative indices {negative}.", "indices start at 0.")
    if limit_to_available:
        missing = [d for d in parsed if d >= available]
        if missing:
            raise _refuse(devices, f"asks for {accelerator} device index(es) {missing} but this machine has "
                          f"indices {list(range(available))}.", f"choose among {list(range(available))}.")
    return parsed
