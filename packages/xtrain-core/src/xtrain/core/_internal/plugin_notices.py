"""What the registry tells the user about installed plugins, outside of errors.

- :func:`split_claims`: who owns a name several distributions register. A first-party name (one a first-party
  distribution registers, or one the first-party name table in :mod:`.hints` lists) belongs to the first-party
  distribution only: a third party's claim is ignored, whether or not the first-party package is installed.
- :func:`announce_first_party_claims`: one warning per third-party distribution that registers first-party names,
  listing them all, instead of one warning per name labelled with an argument the user never passed.
- :func:`warn_at_user`: a warning attributed to the first frame outside xtrain (the user's ``Trainer(...)`` line).
- :func:`slow_import_message`: the warning for a plugin that took long to import, and :func:`hang_notice`, what
  :mod:`.import_watch` prints while one is still importing.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from xtrain.core._internal.hints import FIRST_PARTY, install_hint
from xtrain.core._internal.user_warning import warn_at_user

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint, EntryPoints

__all__ = ["announce_first_party_claims", "distribution", "forget_announcements", "hang_notice", "slow_import_message",
           "split_claims", "tell", "warn_at_user"]

_announced: set[str] = set()  # distributions already told about, once per process (until a registry's refresh())
_scanned = False


def normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def split_claims(group: str, name: str, distributions: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(owners, ignored)``: the distributions whose claim on ``name`` in ``group`` counts, and the ignored ones.

    A name a first-party distribution registers is that distribution's; a name the first-party table lists for a
    package that is not installed has no owner (asking for it gives the ``pip install`` line); any other name is
    owned by everyone who claims it (two owners are an error when it is asked for).
    """
    claimants = sorted(distributions)
    first_party = tuple(d for d in claimants if normalized(d) in FIRST_PARTY)
    if first_party:
        return first_party, tuple(d for d in claimants if d not in first_party)
    if install_hint(group, name) is not None:
        return (), tuple(claimants)
    return tuple(claimants), ()


_DISTRIBUTIONS: dict[int, tuple[str, str]] = {}  # id of a Distribution -> (name, version), until a refresh()


def distribution(ep: EntryPoint) -> tuple[str, str]:
    """The name and version of the distribution that declares ``ep``: each read parses its metadata file, so they
    are read once per distribution for all its entry points and all the registries."""
    if ep.dist is None:
        return "<unknown distribution>", "?"
    key = id(ep.dist)
    if key not in _DISTRIBUTIONS:
        _DISTRIBUTIONS[key] = (ep.dist.name, ep.dist.version)
    return _DISTRIBUTIONS[key]


_INSTANCE_EXAMPLES = {"xtrain.accelerators": "accelerator=TheirAccelerator()",
                      "xtrain.strategies": "strategy=TheirStrategy()", "xtrain.precision": "precision=TheirPrecision()",
                      "xtrain.checkpoint_io": "plugins=[TheirCheckpointIO()]",
                      "xtrain.environments": "plugins=[TheirEnvironment()]"}


def _instance_example(groups: Iterable[str]) -> str:
    """How to pass a plugin of each entry point group as an instance (``strategy=TheirStrategy()``)."""
    return ", ".join(_INSTANCE_EXAMPLES.get(group, "an instance") for group in sorted(set(groups)))


def tell(message: str, category: type[Warning]) -> None:
    """A notice about an installed plugin that the run did not name: a warning, but never an exception. Under
    ``-W error`` (a test suite's ``filterwarnings = error``) one broken or clashing package would otherwise stop
    every ``Trainer()``, its name unasked; the notice then goes to stderr."""
    try:
        warn_at_user(message, category)
    except category:
        print(f"{category.__name__}: {message}", file=sys.stderr)


def forget_announcements() -> None:
    """After a registry's refresh(): scan again and tell again."""
    global _scanned
    _scanned = False
    _announced.clear()
    _DISTRIBUTIONS.clear()


def announce_first_party_claims(installed: Mapping[str, EntryPoints], groups: Iterable[str],
                                category: type[Warning]) -> None:
    """Warn once per third-party distribution that registers first-party names in any of ``groups`` of
    ``installed``."""
    global _scanned
    if _scanned:
        return
    _scanned = True
    found: dict[tuple[str, str], dict[str, str]] = {}
    for ep in (ep for group in sorted(set(groups)) for ep in installed.get(group, ())):
        dist, version = distribution(ep)
        found.setdefault((ep.group, ep.name.lower()), {})[dist] = version
    by_distribution: dict[str, list[str]] = {}
    claims_groups: dict[str, set[str]] = {}
    versions: dict[str, str] = {}
    for (group, name), dists in sorted(found.items()):
        owners, ignored = split_claims(group, name, dists)
        for dist in ignored:
            versions[dist] = dists[dist]
            owner = (" and ".join(owners) if owners
                     else f"{(install_hint(group, name) or '').split('[')[0]}, which is not installed")
            by_distribution.setdefault(dist, []).append(f"{name!r} ({group}, provided by {owner})")
            claims_groups.setdefault(dist, set()).add(group)
    for dist, claims in by_distribution.items():
        if dist in _announced:
            continue
        _announced.add(dist)
        tell(f"{dist} {versions[dist]} registers first-party names {', '.join(claims)}; they are ignored: a "
             f"third-party plugin can neither take over nor disable a built-in one. Fix: the maintainers of {dist} "
             f"should register other names (to use its plugins now, pass them as instances, e.g. "
             f"{_instance_example(claims_groups[dist])}), or uninstall {dist}.", category)


def hang_notice(argument: str, name: str, origin: str, dist: str, seconds: float, pin: str | None) -> str:
    """What :func:`~xtrain.core._internal.import_watch.watch_import` prints about the plugin ``name`` still importing after ``seconds``."""
    instead = f" Or pass {pin}: an explicit choice imports no other plugin." if pin else ""
    return (f"xtrain: still importing the {argument} plugin {name!r} ({origin}) after {seconds:g} s. If it never "
            f"finishes, stop the program (Ctrl-C) and uninstall it: pip uninstall {dist}.{instead}")


def slow_import_message(argument: str, name: str, origin: str, dist: str, seconds: float, *, automatic: str | None,
                        pin: str | None) -> str:
    """The warning for a plugin that took ``seconds`` to import; ``automatic``: the choice that imported it unasked
    (``"accelerator='auto' imported 'npu'"``), ``None`` when it was asked for by name."""
    report = (f"report this to the maintainers of {dist} (an entry point should import fast and defer heavy imports "
              f"to the methods that need them)")
    if automatic is None:
        return f"{argument}={name!r}: the plugin ({origin}) took {seconds:.1f} s to import. Fix: {report}."
    instead = f"; or pass {pin}: an explicit choice imports no other plugin" if pin else ""
    return (f"{automatic}, and the plugin ({origin}) took {seconds:.1f} s to import; every program that makes this "
            f"choice waits for it. Fix: {report}; uninstall {dist} if you do not use it{instead}.")
