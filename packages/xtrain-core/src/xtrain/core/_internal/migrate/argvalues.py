"""Lightning argument values whose meaning decides what migrating does with the argument.

Shared by the Python rewrite (``arguments.py``, values read from LibCST nodes) and the YAML one (``config.py``,
values read from scalars), so a ``SLURMEnvironment(auto_requeue=True)`` or a ``gpus: 0`` goes the same way in both.
Each row of the rule table that :func:`removable` serves says "removed when X: <what xtrain does>; flagged otherwise:
<why, what to do>"; :func:`device_move` serves the Lightning 1.x device counts (``gpus=``, ``tpu_cores=``,
``num_processes=``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import NamedTuple

from xtrain.core._internal.migrate.lookup import rule
from xtrain.core._internal.migrate.rules import Action, Section

__all__ = ["DEVICE_COUNTS", "NULL", "DeviceMove", "device_move", "flag_note", "removable", "yaml_value"]

NULL = ("null", "~", "Null", "NULL", "")
_SIGUSR1 = ("SIGUSR1", "signal.SIGUSR1", "signal.Signals.SIGUSR1", "Signals.SIGUSR1", 10)

# "Class(key=)" -> whether a value (a literal, or a dotted name as a string) is the Lightning default that xtrain does
_DEFAULTS: dict[str, Callable[[object], bool]] = {
    "SLURMEnvironment(auto_requeue=)": lambda v: v is True,
    "SLURMEnvironment(requeue_signal=)": lambda v: v is None or v in _SIGUSR1,
    "ModelCheckpoint(save_on_exception=)": lambda v: v is False,
}


def removable(label: str, value: object) -> bool | None:
    """Whether ``label``'s (``"SLURMEnvironment(auto_requeue=)"``) argument with ``value`` can go (``None`` when the
    table has no such row, so the caller treats the argument by its other rules)."""
    check = _DEFAULTS.get(label)
    r = rule(Section.ARGUMENT, label)
    if check is None or r is None or r.action is not Action.TRANSLATE:
        return None
    return check(value)


def flag_note(label: str, shown: str) -> str:
    """The note for ``label``'s argument when its value (written ``shown``) is not the default: why it stays, what
    xtrain does instead, and what to do."""
    r = rule(Section.ARGUMENT, label)
    note = r.note if r is not None else ""
    what = re.sub(r"^removed when [^:]*: ", "", note.partition("; flagged otherwise: ")[0])
    why = note.partition("; flagged otherwise: ")[2]
    return f"{label.partition('(')[0]}({shown}) is not accepted by xtrain: {why}; {what}. Remove the argument"


def yaml_value(scalar: str) -> object:
    """A YAML scalar as the value :func:`removable` compares (``true`` -> ``True``, ``null`` -> ``None``)."""
    text = scalar.strip().strip("'\"")
    if text in NULL:
        return None
    return {"true": True, "false": False}.get(text.lower(), text)


DEVICE_COUNTS = {"gpus": "gpu", "tpu_cores": "tpu", "num_processes": "cpu"}   # Lightning 1.x key -> its accelerator
_CPU = (0, None, "0", "")   # the counts Lightning 1.x read as "train on the CPU"


class DeviceMove(NamedTuple):
    """What a Lightning 1.x device count becomes.

    ``devices``: whether the value moves to ``devices=`` (``False``: it was 0 or None, no device count at all).
    ``accelerator``: the ``accelerator=`` to write (in place of the argument when ``devices`` is ``False``), or
    ``None`` when there is none to write (``accelerator=`` is given, or ``num_processes=0`` already meant the CPU).
    """

    devices: bool
    accelerator: str | None


def device_move(key: str, value: object, given: Collection[str]) -> DeviceMove | None:
    """What the device count ``key`` (a key of :data:`DEVICE_COUNTS`) with ``value`` becomes, next to the other
    arguments ``given``; ``None`` when ``devices=`` is given as well (flag it: which one is meant is unknown).

    Lightning 1.x read ``gpus=0`` or ``None`` (and the string ``"0"``) as "train on the CPU", where xtrain's default
    accelerator may pick a GPU, so those become ``accelerator="cpu"`` rather than disappearing.
    """
    accelerator = DEVICE_COUNTS[key]
    free = "accelerator" not in given
    if value in _CPU:
        return DeviceMove(False, "cpu" if accelerator != "cpu" and free else None)
    if "devices" in given:
        return None
    return DeviceMove(True, accelerator if free else None)
