"""Seeding every generator at once."""

from __future__ import annotations

import os
import random
import sys

import torch

__all__ = ["exported_seed", "seed_everything"]


def seed_everything(seed: int | None = None, workers: bool = True, verbose: bool = False) -> int:
    """Seed Python's ``random``, NumPy (if installed) and torch (CPU and all devices), and export ``XTRAIN_SEED``.

    Args:
        seed: The seed (``None``: the ``XTRAIN_SEED`` environment variable, else 0).
        workers: Also export it so that spawned processes and dataloader workers derive their seeds from it.
        verbose: Print the seed (on every process).

    Returns:
        The seed.
    """
    if seed is None:
        seed = exported_seed()
    if verbose:
        print(f"Seed set to {seed}")
    random.seed(seed)
    torch.manual_seed(seed)
    np = sys.modules.get("numpy")
    if np is None:
        try:
            import numpy as np
        except ImportError:  # pragma: no cover - numpy is optional
            np = None
    if np is not None:
        np.random.seed(seed % (2**32))
    if workers:
        os.environ["XTRAIN_SEED"] = str(seed)
    return seed


def exported_seed() -> int:
    """The seed :func:`seed_everything` exported (``XTRAIN_SEED``), else 0: what distributed samplers shuffle with,
    as Lightning's read ``PL_GLOBAL_SEED``, so a seeded run's ranks see the data in an order that follows the seed."""
    env = os.environ.get("XTRAIN_SEED", "")
    return int(env) if env.lstrip("-").isdigit() else 0
