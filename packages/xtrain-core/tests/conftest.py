from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from xtrain.core.testing.fixtures import installed_distribution, restore_environment

sys.path.insert(0, str(Path(__file__).parent))  # the tests' helper modules (checkpoint_helpers)

from checkpoint_helpers import to_sharded, train_full  # found through the path above

__all__ = ["genuine", "installed_distribution", "restore_environment", "sharded"]


@pytest.fixture(scope="module")
def genuine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real run's full checkpoint and the same run as a sharded checkpoint, for the hostile-file tests to alter."""
    root = tmp_path_factory.mktemp("genuine")
    full, _ = train_full(root)
    return full, to_sharded(full, root / "sharded.ckpt")


@pytest.fixture
def sharded(genuine: tuple[Path, Path], tmp_path: Path) -> Path:
    """A copy of :func:`genuine`'s sharded checkpoint that a test may damage."""
    path = tmp_path / "work" / "sharded.ckpt"
    shutil.copytree(genuine[1], path)
    return path
