"""The version of xtrain-accelerators, read by hatchling at build time and by the import-time core check."""

__all__ = ["__version__"]

__version__ = "1.0.0"
