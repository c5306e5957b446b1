"""``xtrain plugin list``: every installed plugin by kind, where it comes from and, with ``--check``, whether it loads.

A broken third-party plugin never stops a run that does not name it (the automatic choice skips it with a notice),
so a user or vendor needs one place to see which installed plugins load and why the others do not, without
writing a Trainer for each.
"""

from __future__ import annotations

import warnings

from xtrain.core.errors import ConfigError
from xtrain.core.registry import all_registries

__all__ = ["plugin_report"]


def plugin_report(*, check: bool) -> tuple[list[str], int]:
    """The listing's lines and how many plugins failed to load (``check``: each is imported and created as the
    registry would create it for a run, so a failure reads as that run's error)."""
    lines: list[str] = []
    broken = 0
    for registry in all_registries():
        lines.append(f"{registry.group} ({registry.argument}=...)")
        for name in registry.names():
            status = ""
            if check:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # a slow import is reported by its own notice, not here
                    try:
                        registry.load(name)
                        status = "  [loads]"
                    except ConfigError as err:
                        broken += 1
                        status = f"\n      BROKEN: {err}"
            lines.append(f"  {name}: {registry.origin_of(name)}{status}")
    return lines, broken
