from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from importlib.util import find_spec
from pathlib import Path

import pytest

from xtrain.core.testing import installed_distribution as _installed

HAS_XLA = find_spec("torch_xla") is not None

if HAS_XLA and os.environ.get("PJRT_DEVICE"):
    # torch's autograd engine sizes its per-device queues at the first backward pass of the process; the XLA runtime
    # must know its devices by then, or backward on XLA fails with an INTERNAL ASSERT in engine.cpp. Some tests train
    # on the CPU before XLA in this process, so the runtime starts here.
    import torch_xla

    torch_xla.device()


def pytest_sessionstart(session: pytest.Session) -> None:
    """In the ``xla`` nox session the XLA tests must run: a missing torch_xla fails the run instead of skipping."""
    if os.environ.get("XTRAIN_REQUIRE_XLA") == "1" and not HAS_XLA:
        raise pytest.UsageError("XTRAIN_REQUIRE_XLA=1 but torch_xla is not installed in this environment")


@pytest.fixture(autouse=True)
def _restore_environment() -> Iterator[None]:
    """Tests that set PJRT_DEVICE, CPU_NUM_DEVICES and the like must not leak them into the next test."""
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
