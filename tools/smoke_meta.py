"""Run in a venv where only the meta-package ``xtrain`` was installed (from built wheels): everything is there."""

from __future__ import annotations

from importlib.metadata import version

from xtrain.core.registry import ACCELERATORS, PRECISIONS, STRATEGIES


def main() -> None:
    for dist in ("xtrain", "xtrain-core", "xtrain-strategies", "xtrain-precision", "xtrain-accelerators"):
        print(f"{dist} {version(dist)}")
    import xtrain.accelerators
    import xtrain.precision
    import xtrain.strategies  # noqa: F401

    assert {"cpu", "cuda", "xla"} <= set(ACCELERATORS.names()), ACCELERATORS.names()
    assert {"single_device", "ddp", "ddp_spawn"} <= set(STRATEGIES.names()), STRATEGIES.names()
    assert {"32-true", "bf16-mixed", "64-true"} <= set(PRECISIONS.names()), PRECISIONS.names()
    print("the meta-package installed every package")


if __name__ == "__main__":
    main()
