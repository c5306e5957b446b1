"""pytest fixtures for the test suites of xtrain and its plugins: import the ones you want into a ``conftest.py``.

``from xtrain.core.testing.fixtures import installed_distribution, restore_environment`` makes them fixtures of
that directory (``restore_environment`` is autouse, so importing it is enough).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from xtrain.core.testing.doubles import installed_distribution as _installed

__all__ = ["installed_distribution", "restore_environment"]


@pytest.fixture(autouse=True)
def restore_environment() -> Iterator[None]:
    """Tests that set MASTER_PORT, LOCAL_RANK, SLURM_*, PJRT_DEVICE and the like must not leak them into the next."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def installed_distribution(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Install a real distribution (a dist-info directory on sys.path) declaring entry points; undone afterwards.

    Call it as ``installed_distribution(name, entry_points, modules=None)``; it returns the site directory.
    """
    with ExitStack() as stack:

        def install(name: str, entry_points: dict[str, dict[str, str]], modules: dict[str, str] | None = None) -> Path:
            return stack.enter_context(_installed(tmp_path / f"site-{name}", name, entry_points, modules))

        yield install
