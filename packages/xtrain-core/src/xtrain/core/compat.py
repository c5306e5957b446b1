"""Version checks that plugin packages run at import time.

A plugin package calls :func:`require_core` in its ``__init__``, so a plugin installed next to a core that is too old
or too new (``pip install --no-deps``, a broken environment) fails at import with both versions in the message,
instead of failing later with an ``AttributeError`` deep in a run.
"""

from __future__ import annotations

import re

from xtrain.core.__about__ import __version__ as core_version

__all__ = ["parse_version", "require_core"]


def parse_version(version: str) -> tuple[int, ...]:
    """The numeric release part of a version string: ``"1.2.0rc1"`` -> ``(1, 2, 0)``."""
    match = re.match(r"\d+(\.\d+)*", version.strip())
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(p) for p in match.group(0).split("."))


def require_core(distribution: str, version: str, *, minimum: str, below: str, installed: str | None = None) -> None:
    """Raise ``ImportError`` unless ``minimum <= xtrain-core < below``.

    Args:
        distribution: The plugin's distribution name, for the message (``"xtrain-strategies"``).
        version: The plugin's own version.
        minimum: The oldest xtrain-core it works with.
        below: The first xtrain-core it does not work with (the next major).
        installed: The core version to check (default: the one importing this).
    """
    found = installed or core_version
    if not parse_version(minimum) <= parse_version(found) < parse_version(below):
        raise ImportError(
            f"{distribution} {version} needs xtrain-core>={minimum},<{below}, but xtrain-core {found} is installed. "
            f"Fix: pip install 'xtrain-core>={minimum},<{below}'"
        )
