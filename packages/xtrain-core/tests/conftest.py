from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from xtrain.core.registry import all_registries


@pytest.fixture(autouse=True)
def _restore_environment() -> Iterator[None]:
    """Tests that set MASTER_PORT, LOCAL_RANK and the like must not leak them into the next test."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def installed_distribution(tmp_path: Path) -> Iterator[object]:
    """Install a real distribution (a dist-info directory on sys.path) declaring entry points; undone afterwards."""
    created: list[str] = []

    def install(name: str, entry_points: dict[str, dict[str, str]], modules: dict[str, str] | None = None) -> Path:
        root = tmp_path / f"site-{name}"
        info = root / f"{name.replace('-', '_')}-1.0.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0.0\n")
        lines = []
        for group, entries in entry_points.items():
            lines.append(f"[{group}]")
            lines += [f"{k} = {v}" for k, v in entries.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        for module, source in (modules or {}).items():
            (root / f"{module}.py").write_text(source)
        sys.path.insert(0, str(root))
        created.append(str(root))
        for registry in all_registries():
            registry.refresh()
        return root

    yield install
    for path in created:
        sys.path.remove(path)
    for registry in all_registries():
        registry.refresh()
