"""Fetching a public data file once into the user's data directory."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

from xtrain.core.errors import CheckpointError

__all__ = ["ensure", "fetch"]


def ensure(path: Path, url: str, *, download: bool, argument: str) -> Path:
    """``path``, downloaded from ``url`` first when it is missing and ``download`` allows it."""
    if path.is_file():
        return path
    if not download:
        raise CheckpointError(f"{path}: the data file is missing and download=False. Fix: pass download=True, or "
                              f"put the file there (from {url}), or point {argument} at the folder that has it.")
    fetch(url, path, argument=argument)
    return path


def fetch(url: str, destination: Path, *, argument: str) -> None:
    """Download ``url`` to ``destination`` through a temporary name, so an interrupted download leaves no file."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, partial.open("wb") as out:
            while chunk := response.read(1 << 20):
                out.write(chunk)
    except OSError as err:
        partial.unlink(missing_ok=True)
        raise CheckpointError(f"{destination}: could not download {url} ({err}). Fix: download it by hand to that "
                              f"path, or check {argument} and the network.") from err
    os.replace(partial, destination)
