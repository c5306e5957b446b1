"""Fixtures of xtrain-strategies' tests; the helpers live in strategies_helpers.py."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from strategies_helpers import _restore_environment, train

__all__ = ["_restore_environment", "train"]
