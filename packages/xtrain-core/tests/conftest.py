from __future__ import annotations

import sys
from pathlib import Path

from xtrain.core.testing.fixtures import installed_distribution, restore_environment

sys.path.insert(0, str(Path(__file__).parent))  # the tests' helper modules (checkpoint_helpers)

__all__ = ["installed_distribution", "restore_environment"]
