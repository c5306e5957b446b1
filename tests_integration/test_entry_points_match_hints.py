"""The install-hint table in xtrain-core and the entry points of the installed first-party packages agree.

Core's own names (``cpu``, ``single_device``, ...) are always installed, so they need no hint: the check covers
every other installed first-party distribution, in both directions.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution

import pytest

from xtrain.core._internal.hints import first_party_names
from xtrain.core.registry import all_registries

FIRST_PARTY = ("xtrain-strategies", "xtrain-precision", "xtrain-accelerators")


def _installed() -> list[str]:
    found = []
    for name in FIRST_PARTY:
        try:
            distribution(name)
        except PackageNotFoundError:
            continue
        found.append(name)
    return found


def _base(requirement: str) -> str:
    return requirement.split("[")[0]


@pytest.mark.parametrize("group", [r.group for r in all_registries()])
def test_every_first_party_entry_point_has_a_hint_and_every_hint_an_entry_point(group: str) -> None:
    installed = _installed()
    assert "xtrain-strategies" in installed, "run the tests with xtrain-strategies installed"
    declared = {ep.name: dist for dist in installed for ep in distribution(dist).entry_points if ep.group == group}
    hinted = {name: _base(req) for name, req in first_party_names(group).items() if _base(req) in installed}
    assert declared == hinted, (f"{group}: entry points without a hint: {sorted(declared.keys() - hinted.keys())}; "
                                f"hints without an entry point: {sorted(hinted.keys() - declared.keys())}")
