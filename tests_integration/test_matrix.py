"""Every cell of the matrix: refused cells must give their exact refusal; runnable cells run for real where they can.

``XTRAIN_MATRIX_GROUPS=cpu-ddp,cpu-fsdp`` limits the run to some accelerator-strategy groups (the nox
``matrix(<group>)`` sessions set it). The outcome of every cell is written to ``build/matrix-report.json``, from which
``tools/gen_compatibility.py`` renders ``docs/compatibility.md``.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
import torch

from matrix import Cell, cells
from xtrain.core import ConfigError
from xtrain.core._internal.resolve import resolve
from xtrain.core._internal.versions import xtrain_versions
from xtrain.core.registry import ACCELERATORS, STRATEGIES
from xtrain.core.testing import python_command, run_processes, simulate_devices

SCRIPT = str(Path(__file__).parent / "scripts" / "matrix_group.py")
REPORT = Path(__file__).resolve().parents[1] / "build" / "matrix-report.json"
_WANTED = {g for g in os.environ.get("XTRAIN_MATRIX_GROUPS", "").split(",") if g}
_outcomes: dict[str, dict[str, str]] = {}


def _environment() -> str:
    """What this run used, recorded with each cell: backends install different torch versions (XLA pins its own)."""
    from importlib.metadata import PackageNotFoundError, version

    found = [f"{name} {value}" for name, value in sorted(xtrain_versions().items())]
    for dist in ("torch_xla", "horovod"):
        try:
            found.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            pass
    return ", ".join(found) + f", Python {platform.python_version()}"


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    if _outcomes:
        REPORT.parent.mkdir(exist_ok=True)
        previous = json.loads(REPORT.read_text()).get("cells", {}) if REPORT.exists() else {}
        environment = _environment()
        ours = {cell: {**outcome, "with": environment} for cell, outcome in _outcomes.items()}
        REPORT.write_text(json.dumps({"cells": {**previous, **ours}}, indent=1, sort_keys=True))


@pytest.fixture(scope="module")
def group_result(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Cell], dict[str, Any]]:
    done: dict[str, Path] = {}

    def get(cell: Cell) -> dict[str, Any]:
        if cell.group not in done:
            precisions = [c.precision for c in cells() if c.group == cell.group and c.outcome == "runs"]
            out = tmp_path_factory.mktemp(cell.group)
            result = run_processes([python_command(SCRIPT, cell.accelerator, cell.strategy, str(cell.devices),
                                                   ",".join(precisions), str(out))], timeout=600, cwd=out)
            assert result.returncodes == [0], result.output
            done[cell.group] = out
        base = done[cell.group] / cell.precision
        return {run: torch.load(base / f"{run}.pt", weights_only=True) for run in ("a", "b")}

    return get


def _refused(cell: Cell) -> None:
    acc = ACCELERATORS.load(cell.accelerator)
    # Simulated where the hardware is missing or too small, so the refusal asserted is the declared one.
    simulate = not acc.is_available() or acc.device_count() < cell.devices  # type: ignore[attr-defined]
    with simulate_devices(acc, cell.devices) if simulate else nullcontext(), pytest.raises(ConfigError) as info:  # type: ignore[arg-type]
        resolve(accelerator=cell.accelerator, strategy=cell.strategy, precision=cell.precision, devices=cell.devices)
    message = str(info.value)
    assert message.startswith(f"{cell.argument}="), message
    assert cell.refusal in message, message


@pytest.mark.parametrize("cell", cells(), ids=[c.id for c in cells()])
def test_cell(cell: Cell, group_result: Callable[[Cell], dict[str, Any]],
              record_property: Callable[[str, object], None]) -> None:
    # In the junit XML, for tools/ci_summary.py: what the matrix declares, beside what happened.
    record_property("group", cell.group)
    record_property("declared", cell.outcome)
    if _WANTED and cell.group not in _WANTED:
        pytest.skip(f"not selected (XTRAIN_MATRIX_GROUPS={','.join(sorted(_WANTED))})")
    if cell.outcome == "refused":
        _refused(cell)
        _outcomes[cell.id] = {"outcome": "refused", "detail": f"{cell.argument}: {cell.refusal}"}
        return
    if cell.unavailable:
        _outcomes[cell.id] = {"outcome": "not here", "detail": cell.unavailable}
        pytest.skip(cell.unavailable)
    runs = group_result(cell)
    first, resumed = runs["a"], runs["b"]
    assert first["global_step"] == 4 and resumed["global_step"] == 4
    losses = first["losses"]
    assert losses[-1] < losses[0], f"loss did not decrease: {losses}"
    if STRATEGIES.create(cell.strategy).resumes_exactly:
        for key, value in first["weights"].items():
            assert torch.equal(value, resumed["weights"][key]), f"resumed run differs in {key}"
    else:  # the strategy declares it cannot resume bitwise: the resumed run must still be a sound run
        assert all(torch.isfinite(v).all() for v in resumed["weights"].values())
    _outcomes[cell.id] = {"outcome": "runs", "detail": f"trained, resumed exactly (loss {losses[0]:.3f} -> "
                                                        f"{losses[-1]:.3f})"}
