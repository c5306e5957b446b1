from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from xtrain.core.testing import installed_distribution as _installed


@pytest.fixture(autouse=True)
def _restore_environment() -> Iterator[None]:
    """Tests that set MASTER_PORT, LOCAL_RANK and the like must not leak them into the next test."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def installed_distribution(tmp_path: Path) -> Iterator[object]:
    """Install a real distribution (a dist-info directory on sys.path) declaring entry points; undone afterwards."""
    with ExitStack() as stack:

        def install(name: str, entry_points: dict[str, dict[str, str]], modules: dict[str, str] | None = None) -> Path:
            return stack.enter_context(_installed(tmp_path / f"site-{name}", name, entry_points, modules))

        yield install
