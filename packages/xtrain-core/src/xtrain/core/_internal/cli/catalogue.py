"""The plugin catalogue shown by ``xtrain --help``: every installed plugin name with the package that provides it.

It is read from the entry points alone and imports no plugin: ``--help`` must answer at once even when a plugin is
slow, hangs or fails at import. (The documentation's catalogue page adds each plugin's description.)
"""

from __future__ import annotations

from xtrain.core.registry import ACCELERATORS, CHECKPOINT_IO, ENVIRONMENTS, PRECISIONS, STRATEGIES, Registry

__all__ = ["catalogue"]


def _lines(title: str, registry: Registry[object]) -> list[str]:
    lines = [f"{title}:"]
    for name in registry.names():
        lines.append(f"  {name:<40} [{registry.distribution_of(name)}]")
    if len(lines) == 1:
        lines.append("  (none installed)")
    return lines


def catalogue() -> str:
    """The installed accelerators, strategies, precisions, checkpoint IO and cluster environments, one name a line,
    each with the providing package."""
    sections = [_lines("accelerators (--trainer.accelerator)", ACCELERATORS),
                _lines("strategies (--trainer.strategy)", STRATEGIES),
                _lines("precisions (--trainer.precision)", PRECISIONS),
                _lines("checkpoint IO (--trainer.plugins)", CHECKPOINT_IO),
                _lines("cluster environments (--trainer.plugins; detected when not given)", ENVIRONMENTS)]
    return "\n\n".join("\n".join(s) for s in sections)
