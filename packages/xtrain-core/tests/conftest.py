from __future__ import annotations

from xtrain.core.testing.fixtures import installed_distribution, restore_environment

__all__ = ["installed_distribution", "restore_environment"]
