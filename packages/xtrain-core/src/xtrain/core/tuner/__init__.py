"""Tuners: the learning-rate range test and the batch-size finder.

``from xtrain.core.tuner import Tuner``; imported on first use (not by ``import xtrain.core``).
"""

from __future__ import annotations

from xtrain.core.tuner.lr_finder import LRFinder
from xtrain.core.tuner.tuner import Tuner

__all__ = ["LRFinder", "Tuner"]
