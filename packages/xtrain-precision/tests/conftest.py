from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from xtrain.core import Trainer
from xtrain.precision import SlowPrecisionWarning


@pytest.fixture(autouse=True)
def _quiet_cpu_warnings() -> Iterator[None]:
    """The CPU here emulates float16; tests that check that warning enable it themselves."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SlowPrecisionWarning)
        yield
    assert torch.get_default_dtype() == torch.float32, "a test leaked a changed default dtype"


@pytest.fixture
def quiet() -> Callable[..., Trainer]:
    """A Trainer without logger, progress bar, summary, checkpointing or sanity check, unless asked."""

    def make(**kwargs: Any) -> Trainer:
        defaults: dict[str, Any] = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False,
                                    "enable_checkpointing": False, "num_sanity_val_steps": 0}
        return Trainer(**{**defaults, **kwargs})

    return make
