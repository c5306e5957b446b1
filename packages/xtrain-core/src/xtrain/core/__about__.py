"""The version of xtrain-core, read by hatchling at build time and by plugins at import time."""

__all__ = ["__version__"]

__version__ = "1.0.0"
