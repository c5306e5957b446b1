"""Plugins found by name through entry points.

``Trainer(strategy="ddp")`` looks ``"ddp"`` up in the ``xtrain.strategies`` entry-point group. xtrain-core's own
defaults are registered the same way as a third party's, so core holds no list of plugin names and never imports a
plugin package by name. Entry points are loaded one at a time, on use: listing names imports nothing.

An entry point names a class or a factory; calling it with no arguments returns a plugin instance. A distribution
registers a new name by declaring, in its ``pyproject.toml``::

    [project.entry-points."xtrain.strategies"]
    my_strategy = "my_package.strategy:MyStrategy"

A plugin is isolated from the others: one that fails to import or to be created (``sys.exit`` included), or a name
two third-party distributions claim, is a :class:`~xtrain.core.errors.ConfigError` naming the entry point and its
distribution when asked for by name, and is skipped with one :class:`PluginWarning` when ``"auto"`` looks through
every name. A third party that claims a first-party name (``"cpu"``, ``"ddp"``, or ``"gpu"`` while
xtrain-accelerators is not installed) is ignored with one :class:`PluginWarning` per distribution: it can neither take
over nor disable a built-in. A class of the wrong type (not an ``Accelerator`` in the accelerators group) is refused
before it is created, so its constructor never runs; one whose declared data is not of the documented types (no
``name``, ``auto_priority = "10"``) is a broken plugin too, found when the class is loaded.

A plugin whose import takes more than :data:`SLOW_IMPORT_SECONDS` gets one :class:`PluginWarning` with the seconds:
an automatic choice imports every plugin of its group, so one slow plugin would otherwise slow every ``Trainer()``
without saying which. An import still running after :data:`STUCK_IMPORT_SECONDS` gets a notice on stderr naming the
plugin, so one that hangs at import says which package to remove (a merely slow one gets the warning alone).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import sys
import time
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, EntryPoints, entry_points
from typing import Any, Generic, NamedTuple, TypeVar

from xtrain.core._internal import plugin_notices as notices
from xtrain.core._internal.hints import install_hint
from xtrain.core._internal.import_watch import watch_import
from xtrain.core._internal.plugin_checks import declared_data_problem, loaded_problem
from xtrain.core.errors import ConfigError

__all__ = ["ACCELERATORS", "CHECKPOINT_IO", "ENVIRONMENTS", "PLUGIN_FAILURES", "PRECISIONS", "SLOW_IMPORT_SECONDS",
           "STRATEGIES", "STUCK_IMPORT_SECONDS", "PluginWarning", "Registry", "all_registries"]

_T = TypeVar("_T")

PLUGIN_FAILURES = (Exception, SystemExit)
"""What a plugin's import or call may raise that is contained as a broken plugin (a ``sys.exit`` in a plugin must
not end the user's program); only ``KeyboardInterrupt`` passes through."""

SLOW_IMPORT_SECONDS = 1.0
STUCK_IMPORT_SECONDS = 10.0
"""An entry point that takes longer than this to load gets one :class:`PluginWarning`: xtrain's own plugins load in
milliseconds, so a second is a plugin doing heavy work at import, which every automatic choice would wait for. An
import still running after this long prints a notice naming the plugin on stderr, in case it never returns."""


class PluginWarning(UserWarning):
    """An installed plugin was skipped by an ``"auto"`` choice (it failed to load, has the wrong type, or two
    distributions claim its name), or is slow to import.

    The other plugins still work; the message names the entry point, its distribution, the problem and the fix.
    """


class _Entry(NamedTuple):
    name: str
    value: str
    distributions: tuple[str, ...]
    entry_point: EntryPoint
    version: str

    @property
    def origin(self) -> str:
        """``entry point 'x = pkg.mod:Cls' of acme-x 1.0.0``: where a plugin comes from, for messages."""
        return f"entry point '{self.entry_point.name} = {self.value}' of {self.distributions[0]} {self.version}"


class Registry(Generic[_T]):
    """The names of one entry-point group.

    Args:
        group: The entry-point group, e.g. ``"xtrain.strategies"``.
        argument: The Trainer argument these names are passed to, for messages (``"strategy"``).
        automatic: What messages call the choice that looks through every name of the group; by default
            ``"<argument>='auto'"``, but a group chosen without an ``"auto"`` value (cluster environments are
            detected) must not suggest a value the argument refuses.
        pin: The explicit argument that makes that look-through unnecessary, offered as a fix when a plugin slows
            or breaks it (``"accelerator='cpu'"``); ``None`` for groups that are only ever chosen by name.
    """

    def __init__(self, group: str, argument: str, *, automatic: str | None = None, pin: str | None = None,
                 spellings: Mapping[str, str] | None = None) -> None:
        self.group = group
        self.argument = argument
        self.spellings = dict(spellings or {})  # other frameworks' names: the advice an unknown one gets
        self.automatic = automatic if automatic is not None else f"{argument}='auto'"
        self.pin = pin
        self._entries: dict[str, _Entry] | None = None
        self._loaded: dict[str, Callable[[], _T]] = {}
        self._failed: dict[str, BaseException] = {}  # a plugin whose import failed is not imported again
        self._warned: set[str] = set()
        self._stale: set[str] = set()  # modules of plugins that loaded wrongly: imported afresh after refresh()

    def refresh(self) -> None:
        """Forget what was scanned (after installing a distribution, or fixing a plugin, in a running process).

        The module of a plugin that failed to load (a missing class, wrong declared data) is dropped from
        ``sys.modules``, so the next load imports the fixed source instead of the stale module.
        """
        for module in self._stale:
            sys.modules.pop(module, None)
        self._stale.clear()
        importlib.invalidate_caches()
        notices.forget_announcements()
        _INSTALLED.clear()
        self._entries = None
        self._loaded.clear()
        self._failed.clear()
        self._warned.clear()

    def _scan(self) -> dict[str, _Entry]:
        if self._entries is None:
            found: dict[str, dict[str, EntryPoint]] = {}
            versions: dict[str, str] = {}
            installed = _installed()
            group = installed.get(self.group)
            for ep in group if group is not None else entry_points(group=self.group):
                dist, version = notices.distribution(ep)
                versions.setdefault(dist, version)
                found.setdefault(ep.name.lower(), {}).setdefault(dist, ep)
            entries = {}
            for name, by_dist in found.items():
                owners, _ = notices.split_claims(self.group, name, by_dist)  # third-party first-party claims: none
                if owners:
                    ep = by_dist[owners[0]]
                    entries[name] = _Entry(name, ep.value, owners, ep, versions[owners[0]])
            self._entries = entries
            notices.announce_first_party_claims(installed, {self.group, *(r.group for r in all_registries())},
                                                PluginWarning)
        return self._entries

    def names(self) -> list[str]:
        """Every registered name, sorted, without importing anything."""
        return sorted(self._scan())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.strip().lower() in self._scan()

    def distribution_of(self, name: str) -> str:
        return ", ".join(self._scan()[name.strip().lower()].distributions)

    def origin_of(self, name: str) -> str:
        """``entry point 'x = pkg.mod:Cls' of acme-x 1.0.0``, read without importing anything."""
        return self._scan()[name.strip().lower()].origin

    def name_for(self, cls: type) -> str | None:
        """The name whose entry point names ``cls`` (``module:Class``), read without importing anything."""
        target = f"{cls.__module__}:{cls.__qualname__}"
        return next((entry.name for entry in self._scan().values() if entry.value.replace(" ", "") == target), None)

    def load(self, name: str) -> Callable[[], _T]:
        """The class or factory registered as ``name``, imported now.

        Raises:
            ConfigError: For an unknown name (with the ``pip install`` line for a first-party one), a name that two
                distributions claim, or a plugin that fails to import or misses abstract methods (naming its entry
                point and distribution, with the original error as ``__cause__``). A failed import is not tried
                again until :meth:`refresh`: the same error is raised at once.
        """
        return self._load(name, scanning=False)

    def _load(self, name: str, *, scanning: bool) -> Callable[[], _T]:
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
        failed = self._failed.get(key)
        if failed is not None:  # a broken module re-runs on every import attempt (seconds, side effects): once only
            raise self._broken(name, entry, f"could not be imported: {_describe(failed)}") from failed
        import torch  # noqa: F401  # every plugin needs it: its first import (a second or more) is not the plugin's time

        started, dist = time.perf_counter(), entry.distributions[0]
        watch = watch_import(STUCK_IMPORT_SECONDS, notices.hang_notice(self.argument, name, entry.origin, dist,
                                                                       STUCK_IMPORT_SECONDS, self.pin))
        try:
            loaded = entry.entry_point.load()
        except PLUGIN_FAILURES as err:
            self._failed[key] = err
            self._stale.add(entry.entry_point.module)
            raise self._broken(name, entry, f"could not be imported: {_describe(err)}") from err
        finally:
            watch.cancel()
        seconds = time.perf_counter() - started
        if seconds > SLOW_IMPORT_SECONDS:  # scanning: imported by the automatic choice, unasked
            automatic = f"{self.automatic} imported {name!r}" if scanning else None
            message = notices.slow_import_message(self.argument, name, entry.origin, dist, seconds,
                                                  automatic=automatic, pin=self.pin)
            (notices.tell if scanning else notices.warn_at_user)(message, PluginWarning)
        problem = loaded_problem(self.group, loaded)  # not callable, abstract, or wrong declared data
        if problem is not None:
            self._stale.add(entry.entry_point.module)
            raise self._broken(name, entry, problem)
        self._loaded[key] = loaded
        return loaded  # type: ignore[no-any-return]

    def create(self, name: str, *, base: type[Any] | None = None) -> _T:
        """A new instance of the plugin registered as ``name``.

        Args:
            name: The registered name.
            base: The contract the plugin must implement. A class that does not subclass it is refused before it is
                called, so a wrong registration's constructor never runs; a factory is checked by what it returns.

        Raises:
            ConfigError: As for :meth:`load`, when creating the instance raises, and for a plugin that is not a
                ``base`` (naming the entry point).
        """
        factory = self.load(name)
        if base is not None and inspect.isclass(factory) and not issubclass(factory, base):
            raise self.broken(name, f"names the class {factory.__qualname__}, which is not {_a(base)}.")
        try:
            created = factory()
        except ConfigError:
            raise  # the plugin refusing a setting (e.g. a missing library) speaks for itself: not a broken plugin
        except PLUGIN_FAILURES as err:
            raise self.broken(name, f"could not be created: {_describe(err)}") from err
        if base is not None and not isinstance(created, base):
            raise self.broken(name, f"returned {created!r}, which is not {_a(base)}.")
        problem = declared_data_problem(self.group, created)  # a factory's product, or set in __init__
        if problem is not None:
            raise self.broken(name, problem)
        return created

    def describe(self, name: str) -> str:
        """The first line of the plugin's docstring (imports the plugin's module)."""
        doc = getattr(self.load(name), "__doc__", None) or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""

    def classes(self, base: type[Any]) -> list[tuple[str, Any]]:
        """``(name, class)`` for every name registered as a subclass of ``base``, for ``"auto"`` choices.

        Names that fail to load, that two distributions claim, or that name a class of another type are left out
        with one :class:`PluginWarning` each, so one broken plugin never breaks the automatic choice for everyone.
        Factories are left out silently: only classes declare their capabilities without being created.
        """
        found = []
        for name in self.names():
            try:
                loaded = self._load(name, scanning=True)
            except ConfigError as err:
                self.skip(name, err)
                continue
            if not inspect.isclass(loaded):
                continue
            if issubclass(loaded, base):
                found.append((name, loaded))
            else:
                self.skip(name, self.broken(name, f"names the class {loaded.__qualname__}, which is not {_a(base)}."))
        return found

    def skip(self, name: str, error: BaseException) -> None:
        """Warn, once per name, that ``"auto"`` skipped the plugin ``name`` because of ``error``."""
        key = name.strip().lower()
        if key in self._warned:
            return
        self._warned.add(key)
        if not isinstance(error, ConfigError):
            entry = self._scan().get(key)
            error = self._broken(name, entry, f"raised {_describe(error)}") if entry else error
        text = str(error)
        if isinstance(error, ConfigError) and error.argument:  # the name is said already: no second label
            text = text.removeprefix(f"{error.argument}={error.value!r}: ")
        pin = ""
        if self.pin is not None:
            pin = f" Or pass {self.pin}: an explicit choice does not look through the installed plugins."
        notices.tell(f"{self.automatic} skipped {name!r}: {text}{pin}", PluginWarning)

    def broken(self, name: str, problem: str) -> ConfigError:
        """The error for the plugin ``name`` misbehaving (``problem`` says how), naming its entry point and fix."""
        return self._broken(name, self._scan()[name.strip().lower()], problem)

    def _broken(self, name: str, entry: _Entry, problem: str) -> ConfigError:
        dist = entry.distributions[0]
        return ConfigError(self.argument, name, f"the plugin ({entry.origin}) {problem}",
                           fix=f"pip install -U {dist}; if that does not help, report this to the maintainers of "
                               f"{dist}, or uninstall it.")

    def unknown(self, name: object, *, extra_choices: tuple[str, ...] = ()) -> ConfigError:
        """The error for a name that is not registered."""
        choices = [*extra_choices, *self.names()]
        key = name.strip().lower() if isinstance(name, str) else ""
        requirement = install_hint(self.group, key)
        if requirement is not None:
            return ConfigError(self.argument, name, f"is provided by {requirement.split('[')[0]}, which is not installed.",
                               choices=choices, fix=f"pip install {_quote(requirement)}")
        spelled = self.spellings.get(key or str(name).lower())
        if spelled is not None:
            return ConfigError(self.argument, name, f"is not a registered {self.argument} name.", choices=choices,
                               fix=spelled)
        close = difflib.get_close_matches(key, choices, n=2)  # "dpp" is as near to "ddp" as to "dp": name both
        fix = f"did you mean {' or '.join(map(repr, close))}?" if close else \
            f"pass one of the valid choices to {self.argument}=."
        return ConfigError(self.argument, name, f"is not a registered {self.argument} name.", choices=choices, fix=fix)


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def _a(base: type[Any]) -> str:
    article = "an" if base.__name__[:1].lower() in "aeiou" else "a"
    return f"{article} {base.__name__}"


def _quote(requirement: str) -> str:
    return f"'{requirement}'" if "[" in requirement else requirement


ACCELERATORS: Registry[Any] = Registry("xtrain.accelerators", "accelerator",
                                       pin="accelerator='cpu' (or the accelerator you use)")
STRATEGIES: Registry[Any] = Registry("xtrain.strategies", "strategy")
_HALF = "write precision='16-mixed' (float16 autocast with a gradient scaler) or '16-true' (float16 weights)."
_BF16 = "write precision='bf16-mixed' (bfloat16 autocast, float32 weights) or 'bf16-true' (bfloat16 weights)."
_NO_TE = ("Lightning's Transformer Engine precision has no xtrain plugin (it needs NVIDIA's transformer_engine on a "
          "GPU); write precision='bf16-mixed', or register a plugin of your own (docs/guides/custom-precision.md).")
PRECISIONS: Registry[Any] = Registry("xtrain.precision", "precision", spellings={
    "fp16": _HALF, "half": _HALF, "float16": _HALF, "torch.float16": _HALF, "bfloat16": _BF16, "torch.bfloat16": _BF16,
    "fp32": "write precision='32-true'.", "float32": "write precision='32-true'.",
    "torch.float32": "write precision='32-true'.", "fp64": "write precision='64-true'.",
    "double": "write precision='64-true'.", "float64": "write precision='64-true'.",
    "torch.float64": "write precision='64-true'.", "transformer-engine": _NO_TE, "transformer-engine-float16": _NO_TE})
CHECKPOINT_IO: Registry[Any] = Registry("xtrain.checkpoint_io", "plugins")
ENVIRONMENTS: Registry[Any] = Registry("xtrain.environments", "plugins",
                                       automatic="the cluster environment detection",
                                       pin="plugins=['local'] (or the environment your cluster uses)")


_INSTALLED: dict[str, EntryPoints] = {}  # the five groups' entry points, read once until a refresh()


def _installed() -> dict[str, EntryPoints]:
    """The installed entry points of the five groups: one pass over the distributions' metadata (tens of
    milliseconds with a few hundred installed) serves every registry and the first-party check."""
    if not _INSTALLED:
        everything = entry_points()
        _INSTALLED.update({r.group: everything.select(group=r.group) for r in all_registries()})
    return _INSTALLED


def all_registries() -> tuple[Registry[Any], ...]:
    """The five registries, in the order the docs list them."""
    return ACCELERATORS, STRATEGIES, PRECISIONS, CHECKPOINT_IO, ENVIRONMENTS
