"""Fixtures of xtrain-strategies' tests; the helpers live in strategies_helpers.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from strategies_helpers import _refresh_registries, clean, horovod_missing, train
from xtrain.core.testing.fixtures import restore_environment

__all__ = ["_refresh_registries", "clean", "restore_environment", "train"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """In the ``horovod`` nox session the Horovod tests must run: a missing Horovod fails the run instead of skipping."""
    if os.environ.get("XTRAIN_REQUIRE_HOROVOD") == "1" and horovod_missing() is not None:
        raise pytest.UsageError(f"XTRAIN_REQUIRE_HOROVOD=1 but {horovod_missing()}")
