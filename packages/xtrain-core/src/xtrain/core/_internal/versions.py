"""Versions of the installed xtrain distributions, recorded in every checkpoint."""

from __future__ import annotations

import functools
import os
import re
import sys
from importlib.metadata import PackageNotFoundError, version

__all__ = ["xtrain_versions"]


@functools.cache
def xtrain_versions() -> dict[str, str]:
    """``{"xtrain-core": "1.0.0", ...}`` for every installed distribution named ``xtrain`` or ``xtrain-*``.

    Found by the names of their ``.dist-info``/``.egg-info`` directories on ``sys.path``, then asked for their
    versions by name: iterating ``importlib.metadata.distributions()`` parses every installed distribution's
    metadata (0.4 s with 270 installed, at the first checkpoint of every process).
    """
    found: dict[str, str] = {}
    for name in sorted(_xtrain_names()):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    import torch

    found["torch"] = str(torch.__version__)
    return dict(sorted(found.items()))


def _xtrain_names() -> set[str]:
    names: set[str] = set()
    for entry in sys.path:
        try:
            listing = os.listdir(entry or ".")
        except OSError:
            continue
        for item in listing:
            lowered = item.lower()
            if lowered.startswith("xtrain") and lowered.endswith((".dist-info", ".egg-info")):
                name = re.sub(r"[-_.]+", "-", lowered.rsplit(".", 1)[0].split("-", 1)[0])
                if name == "xtrain" or name.startswith("xtrain-"):
                    names.add(name)
    return names
