"""Plugins found by name through entry points.

``Trainer(strategy="ddp")`` looks ``"ddp"`` up in the ``xtrain.strategies`` entry-point group. xtrain-core's own
defaults are registered the same way as a third party's, so core holds no list of plugin names and never imports a
plugin package by name. Entry points are loaded one at a time, on use: listing names imports nothing.

An entry point names a class or a factory; calling it with no arguments returns a plugin instance. A distribution
registers a new name by declaring, in its ``pyproject.toml``::

    [project.entry-points."xtrain.strategies"]
    my_strategy = "my_package.strategy:MyStrategy"
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

from xtrain.core._internal.hints import install_hint
from xtrain.core.errors import ConfigError

__all__ = ["ACCELERATORS", "CHECKPOINT_IO", "ENVIRONMENTS", "PRECISIONS", "STRATEGIES", "Registry", "all_registries"]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    value: str
    distributions: tuple[str, ...]
    entry_point: EntryPoint


class Registry(Generic[_T]):
    """The names of one entry-point group.

    Args:
        group: The entry-point group, e.g. ``"xtrain.strategies"``.
        argument: The Trainer argument these names are passed to, for messages (``"strategy"``).
    """

    def __init__(self, group: str, argument: str) -> None:
        self.group = group
        self.argument = argument
        self._entries: dict[str, _Entry] | None = None
        self._loaded: dict[str, Callable[[], _T]] = {}

    def refresh(self) -> None:
        """Forget what was scanned (after installing a distribution in a running process)."""
        self._entries = None
        self._loaded.clear()

    def _scan(self) -> dict[str, _Entry]:
        if self._entries is None:
            found: dict[str, dict[str, tuple[str, EntryPoint]]] = {}
            for ep in entry_points(group=self.group):
                dist = ep.dist.name if ep.dist is not None else "<unknown distribution>"
                found.setdefault(ep.name.lower(), {}).setdefault(dist, (ep.value, ep))
            self._entries = {
                name: _Entry(name, next(iter(by_dist.values()))[0], tuple(sorted(by_dist)),
                             next(iter(by_dist.values()))[1])
                for name, by_dist in found.items()
            }
        return self._entries

    def names(self) -> list[str]:
        """Every registered name, sorted, without importing anything."""
        return sorted(self._scan())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.strip().lower() in self._scan()

    def distribution_of(self, name: str) -> str:
        return ", ".join(self._scan()[name.strip().lower()].distributions)

    def load(self, name: str) -> Callable[[], _T]:
        """The class or factory registered as ``name``, imported now.

        Raises:
            ConfigError: For an unknown name (with the ``pip install`` line for a first-party one) or a name that two
                distributions claim.
        """
        key = name.strip().lower()
        if key in self._loaded:
            return self._loaded[key]
        entry = self._scan().get(key)
        if entry is None:
            raise self.unknown(name)
        if len(entry.distributions) > 1:
            raise ConfigError(
                self.argument, name,
                f"is registered in the entry-point group {self.group!r} by more than one distribution: "
                f"{' and '.join(entry.distributions)}.",
                fix="uninstall one of them, or pass the plugin as an instance instead of a name.",
            )
        loaded = entry.entry_point.load()
        if not callable(loaded):
            raise ConfigError(self.argument, name, f"is registered as {entry.value!r}, which is not callable.",
                              fix=f"report this to the maintainers of {entry.distributions[0]}.")
        self._loaded[key] = loaded
        return loaded  # type: ignore[no-any-return]

    def create(self, name: str) -> _T:
        """A new instance of the plugin registered as ``name``."""
        return self.load(name)()

    def describe(self, name: str) -> str:
        """The first line of the plugin's docstring (imports the plugin's module)."""
        doc = getattr(self.load(name), "__doc__", None) or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""

    def unknown(self, name: object, *, extra_choices: tuple[str, ...] = ()) -> ConfigError:
        """The error for a name that is not registered."""
        choices = [*extra_choices, *self.names()]
        key = name.strip().lower() if isinstance(name, str) else ""
        requirement = install_hint(self.group, key)
        if requirement is not None:
            return ConfigError(self.argument, name, f"is provided by {requirement.split('[')[0]}, which is not installed.",
                               choices=choices, fix=f"pip install {_quote(requirement)}")
        close = difflib.get_close_matches(key, choices, n=1)
        fix = f"did you mean {close[0]!r}?" if close else f"pass one of the valid choices to {self.argument}=."
        return ConfigError(self.argument, name, f"is not a registered {self.argument} name.", choices=choices, fix=fix)


def _quote(requirement: str) -> str:
    return f"'{requirement}'" if "[" in requirement else requirement


ACCELERATORS: Registry[Any] = Registry("xtrain.accelerators", "accelerator")
STRATEGIES: Registry[Any] = Registry("xtrain.strategies", "strategy")
PRECISIONS: Registry[Any] = Registry("xtrain.precision", "precision")
CHECKPOINT_IO: Registry[Any] = Registry("xtrain.checkpoint_io", "plugins")
ENVIRONMENTS: Registry[Any] = Registry("xtrain.environments", "plugins")


def all_registries() -> tuple[Registry[Any], ...]:
    """The five registries, in the order the docs list them."""
    return ACCELERATORS, STRATEGIES, PRECISIONS, CHECKPOINT_IO, ENVIRONMENTS
