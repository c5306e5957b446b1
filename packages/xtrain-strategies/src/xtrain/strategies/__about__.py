"""The version of xtrain-strategies, read by hatchling at build time."""

__all__ = ["__version__"]

__version__ = "1.0.0"
