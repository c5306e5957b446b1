"""``devices="2,"`` on the CPU (an outside trial, trial H): parsed as device index 2 on every accelerator, which on
the CPU silently meant one process. The parse stays the same everywhere (the conformance kit's rule); the CPU says
what it starts."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import pytest

from xtrain.core import ConfigError, Trainer


@pytest.mark.parametrize(("devices", "count"), [("2,", 1), ([5], 1), ("1,3", 2)])
def test_cpu_device_indices_warn_what_they_start(devices: Any, count: int) -> None:
    expected = rf"names device index\(es\) .*starts {count} process\(es\)\. Fix: write devices={count}"
    # Two processes need a script (pytest's worker is not one): the ConfigError for that comes after the parse.
    with pytest.warns(UserWarning, match=expected) as record, contextlib.suppress(ConfigError):
        Trainer(accelerator="cpu", devices=devices, logger=False)
    assert any(w.filename == __file__ for w in record), [w.filename for w in record]


@pytest.mark.parametrize("devices", [1, [0], "0,"])
def test_cpu_counts_and_leading_indices_say_nothing(devices: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Trainer(accelerator="cpu", devices=devices, logger=False, enable_progress_bar=False)
