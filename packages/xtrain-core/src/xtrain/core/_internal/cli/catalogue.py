"""The plugin catalogue shown by ``xtrain --help``: every installed name with one line each."""

from __future__ import annotations

from xtrain.core.errors import ConfigError
from xtrain.core.registry import ACCELERATORS, PRECISIONS, STRATEGIES, Registry

__all__ = ["catalogue"]


def _lines(title: str, registry: Registry[object]) -> list[str]:
    lines = [f"{title}:"]
    for name in registry.names():
        try:
            description = registry.describe(name)
        except ConfigError as err:
            description = f"(unusable: {err})"
        except Exception as err:  # noqa: BLE001 - a broken third-party plugin must not break --help
            description = f"(failed to load: {type(err).__name__}: {err})"
        lines.append(f"  {name:<40} {description.replace('``', '')} [{registry.distribution_of(name)}]")
    return lines


def catalogue() -> str:
    """The installed accelerators, strategies and precisions, one line each, with the providing package."""
    sections = [_lines("accelerators (--trainer.accelerator)", ACCELERATORS),
                _lines("strategies (--trainer.strategy)", STRATEGIES),
                _lines("precisions (--trainer.precision)", PRECISIONS)]
    return "\n\n".join("\n".join(s) for s in sections)
