"""Small models and data sets for examples, tests and bug reports; what scripts written for Lightning's ``demos`` use.

Imported only on request (``import xtrain.core`` never loads it). ``xtrain migrate`` rewrites
``lightning.pytorch.demos`` imports to this module.
"""

from __future__ import annotations

from xtrain.core.demos.boring import BoringDataModule, BoringModel, RandomDataset
from xtrain.core.demos.language import Transformer, WikiText2
from xtrain.core.demos.mnist import MNIST, MNISTDataModule

__all__ = ["MNIST", "BoringDataModule", "BoringModel", "MNISTDataModule", "RandomDataset", "Transformer",
           "WikiText2"]
