"""Versions of the installed xtrain distributions, recorded in every checkpoint."""

from __future__ import annotations

import functools
from importlib.metadata import distributions

__all__ = ["xtrain_versions"]


@functools.cache
def xtrain_versions() -> dict[str, str]:
    """``{"xtrain-core": "1.0.0", ...}`` for every installed distribution named ``xtrain`` or ``xtrain-*``."""
    found: dict[str, str] = {}
    for dist in distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name == "xtrain" or name.startswith("xtrain-"):
            found[name] = dist.version
    import torch

    found["torch"] = str(torch.__version__)
    return dict(sorted(found.items()))
