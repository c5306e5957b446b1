from __future__ import annotations

import sys
from pathlib import Path

import pytest

from xtrain.core.testing.fixtures import restore_environment

__all__ = ["restore_environment"]

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))  # matrix.py is imported by tests and by tools/gen_compatibility.py


@pytest.fixture
def repo_root() -> Path:
    return ROOT
