from __future__ import annotations

import os
from importlib.util import find_spec

import pytest

from xtrain.core.testing.fixtures import installed_distribution, restore_environment

__all__ = ["installed_distribution", "restore_environment"]

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
