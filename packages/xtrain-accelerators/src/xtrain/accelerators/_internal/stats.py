"""Small helpers for device statistics, shared by the accelerators of this package."""

from __future__ import annotations

from collections.abc import Callable
from importlib.util import find_spec
from typing import Any

__all__ = ["MB", "allocator_stats", "collect", "collect_pair", "has_module"]

MB = 1024.0 * 1024.0
# What a library raises for a statistic this driver, device or version does not offer.
_MISSING = (RuntimeError, AttributeError, NotImplementedError, ModuleNotFoundError, ValueError, TypeError, KeyError,
            AssertionError)


def has_module(name: str) -> bool:
    """Whether ``name`` can be imported, without importing it (``find_spec`` only reads the path)."""
    try:
        return find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def collect(readers: dict[str, Callable[[], float]]) -> dict[str, float]:
    """Call each reader and keep the numbers that the library could give.

    Device statistics are for monitoring, so a statistic a driver or library version does not offer is left out
    rather than failing the training step that asked for it.
    """
    stats: dict[str, float] = {}
    for key, read in readers.items():
        try:
            stats[key] = float(read())
        except _MISSING:
            continue
    return stats


def collect_pair(read: Callable[[], tuple[int, int]]) -> tuple[float, float] | None:
    """Like :func:`collect` for one reader that returns two numbers (free and total memory), or ``None``."""
    try:
        first, second = read()
    except _MISSING:
        return None
    return float(first), float(second)


def allocator_stats(backend: Any, device: Any) -> dict[str, float]:
    """Memory statistics (MB) of a torch device module with a caching allocator (``torch.cuda``, ``torch.xpu``).

    Allocated, reserved and peak allocated from the allocator; free, total and used from ``mem_get_info`` where the
    driver answers it.
    """
    stats = collect({
        "memory_allocated_mb": lambda: backend.memory_allocated(device) / MB,
        "memory_reserved_mb": lambda: backend.memory_reserved(device) / MB,
        "memory_max_allocated_mb": lambda: backend.max_memory_allocated(device) / MB,
    })
    free_total = collect_pair(lambda: backend.mem_get_info(device))
    if free_total is not None:
        free, total = free_total
        stats |= {"memory_free_mb": free / MB, "memory_total_mb": total / MB, "memory_used_mb": (total - free) / MB}
    return stats
