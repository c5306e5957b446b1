"""Capturing and restoring every random number generator a training step can touch."""

from __future__ import annotations

import random
import struct
import sys
from typing import Any

import torch

__all__ = ["collect_rng_states", "restore_rng_states"]


def collect_rng_states(*, cuda: bool = False) -> dict[str, Any]:
    """The states of Python's, NumPy's (when imported) and torch's global generators, as checkpoint-safe values.

    CUDA's are included when CUDA is initialised, or with ``cuda`` when it is available (code about to initialise it,
    such as a tuning trial on a CUDA device, must capture them before).
    """
    version, internal, gauss = random.getstate()
    # The 625 words as one bytes value: a list of ints costs torch.save a Python call per int, each epoch.
    words = struct.pack(f"<{len(internal)}I", *internal)
    states: dict[str, Any] = {"python": [version, words, gauss], "torch": torch.get_rng_state()}
    np = sys.modules.get("numpy")
    if np is not None:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        # int64, not uint32: a uint32 tensor does not survive a plain pickle (torch 2.13), and the states of all
        # ranks travel through all_gather_object, which pickles.
        states["numpy"] = [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)]
    if torch.cuda.is_available() and (cuda or torch.cuda.is_initialized()):
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    """Restore what :func:`collect_rng_states` returned."""
    version, internal, gauss = states["python"]
    if isinstance(internal, bytes):
        internal = struct.unpack(f"<{len(internal) // 4}I", internal)
    elif not isinstance(internal, list):  # a list: checkpoints of xtrain-core 1.0
        raise TypeError(f"the Python generator's state is a {type(internal).__name__}, not bytes")
    if gauss is not None and type(gauss) is not float:  # random.setstate would keep any object here
        raise TypeError(f"the Python generator's cached gauss is a {type(gauss).__name__}, not a float or None")
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(states["torch"])
    if "numpy" in states:
        import numpy as np

        kind, keys, pos, has_gauss, cached = states["numpy"]
        np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
