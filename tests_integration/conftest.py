from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))  # matrix.py is imported by tests and by tools/gen_compatibility.py


@pytest.fixture(autouse=True)
def _restore_environment() -> Iterator[None]:
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def repo_root() -> Path:
    return ROOT
