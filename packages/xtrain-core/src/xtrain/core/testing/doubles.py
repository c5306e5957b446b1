"""The test doubles the conformance kit allows: simulated device counts and throwaway installed distributions.

Device parsing, auto-selection and "the strategy's device comes from the accelerator" are rules about declared data,
so they can be checked on a machine without the hardware by pretending the hardware is there. That is the one place
a double is right: :func:`simulate_devices` replaces only an accelerator class's ``is_available`` and
``device_count``, nothing that touches a device. :func:`installed_distribution` puts a real ``.dist-info`` with entry
points on ``sys.path``, so a toy third-party plugin is found exactly as an installed one would be.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from xtrain.core.accelerator import Accelerator
from xtrain.core.registry import all_registries

__all__ = ["installed_distribution", "simulate_devices"]

_MISSING = object()


@contextmanager
def simulate_devices(accelerator: type[Accelerator], count: int) -> Iterator[type[Accelerator]]:
    """Within the block, ``accelerator`` reports ``count`` devices and is available exactly when ``count > 0``.

    A test double for machines without the hardware: only the two class methods are replaced (on the class, so
    instances the registry creates see them too) and both are restored afterwards. Nothing can run on the
    simulated devices; use it to check parsing and resolution, never training.
    """
    saved = {name: accelerator.__dict__.get(name, _MISSING) for name in ("is_available", "device_count")}
    setattr(accelerator, "is_available", classmethod(lambda cls: count > 0))  # noqa: B010
    setattr(accelerator, "device_count", classmethod(lambda cls: count))  # noqa: B010
    try:
        yield accelerator
    finally:
        for name, value in saved.items():
            if value is _MISSING:
                delattr(accelerator, name)
            else:
                setattr(accelerator, name, value)


@contextmanager
def installed_distribution(root: Path, name: str, entry_points: dict[str, dict[str, str]],
                           modules: dict[str, str] | None = None) -> Iterator[Path]:
    """Install a distribution ``name`` (version 1.0.0) under ``root`` for the block: its entry points and modules.

    Args:
        root: An empty directory (e.g. pytest's ``tmp_path``); it is put first on ``sys.path``.
        name: The distribution name, e.g. ``"toy-accelerator"``.
        entry_points: ``{group: {name: "module:attribute"}}``.
        modules: ``{module name: source}`` of top-level modules to write beside the metadata.
    """
    info = root / f"{name.replace('-', '_')}-1.0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0.0\n")
    lines: list[str] = []
    for group, entries in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{k} = {v}" for k, v in entries.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for module, source in (modules or {}).items():
        (root / f"{module}.py").write_text(source)
    sys.path.insert(0, str(root))
    _refresh()
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        for module in modules or {}:
            sys.modules.pop(module, None)
        _refresh()


def _refresh() -> None:
    for registry in all_registries():
        registry.refresh()
