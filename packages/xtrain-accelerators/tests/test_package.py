"""The package as installed: entry points in sync with core's install hints, the core version check, lazy imports."""

from __future__ import annotations

import json
import os
from importlib.metadata import distribution
from pathlib import Path

import pytest

from xtrain.accelerators import __version__
from xtrain.accelerators._internal.xla_runtime import pjrt_device
from xtrain.core._internal.hints import first_party_names
from xtrain.core.registry import ACCELERATORS, STRATEGIES
from xtrain.core.testing import python_command, run_processes

XLA_NAMES = {"xla", "tpu", "single_xla", "xla_spmd"}


def _our_entry_points(group: str) -> set[str]:
    return {ep.name for ep in distribution("xtrain-accelerators").entry_points if ep.group == group}


@pytest.mark.parametrize("group", ["xtrain.accelerators", "xtrain.strategies"])
def test_entry_points_and_core_install_hints_agree(group: str) -> None:
    """Core words "pip install xtrain-accelerators" from its hint table; it must name exactly what we register."""
    ours = _our_entry_points(group)
    hinted = {name for name, dist in first_party_names(group).items() if dist.startswith("xtrain-accelerators")}
    assert ours == hinted
    for name in ours:
        expected = "xtrain-accelerators[xla]" if name in XLA_NAMES else "xtrain-accelerators"
        assert first_party_names(group)[name] == expected, name


def test_every_name_is_registered_by_this_distribution_alone() -> None:
    for name in _our_entry_points("xtrain.accelerators"):
        assert ACCELERATORS.distribution_of(name) == "xtrain-accelerators"
    for name in _our_entry_points("xtrain.strategies"):
        assert STRATEGIES.distribution_of(name) == "xtrain-accelerators"


def test_version_is_the_distributions() -> None:
    assert distribution("xtrain-accelerators").version == __version__ == "1.0.0"
    requires = distribution("xtrain-accelerators").requires or []
    assert any(r.replace(" ", "").startswith("xtrain-core<2,>=1.0") or r.replace(" ", "").startswith(
        "xtrain-core>=1.0,<2") for r in requires), requires


def test_a_too_old_core_fails_at_import_with_both_versions(tmp_path: Path) -> None:
    code = ("import xtrain.core.__about__ as about; about.__version__ = '0.9.0'\n"
            "try:\n    import xtrain.accelerators\nexcept ImportError as err:\n    print(err)\n")
    result = run_processes([python_command("-c", code)], timeout=120, cwd=tmp_path).check()
    assert ("xtrain-accelerators 1.0.0 needs xtrain-core>=1.0,<2, but xtrain-core 0.9.0 is installed. "
            "Fix: pip install 'xtrain-core>=1.0,<2'") in result.output


def test_listing_resolving_and_availability_do_not_import_torch_xla(tmp_path: Path) -> None:
    """torch_xla costs seconds to import and must not start its runtime in a parent process: only use imports it."""
    code = (
        "import sys, json\n"
        "import xtrain.accelerators, xtrain.accelerators.xla as x, xtrain.accelerators.gpu\n"
        "import xtrain.accelerators.strategies.single_xla, xtrain.accelerators.strategies.xla_spmd\n"
        "import xtrain.accelerators.strategies.xla_ddp\n"
        "from xtrain.core._internal.resolve import resolve\n"
        "from xtrain.core.registry import ACCELERATORS\n"
        "names = ACCELERATORS.names()\n"
        "available = x.XLAAccelerator.is_available(), x.XLAAccelerator.device_count()\n"
        "chosen = resolve(accelerator='auto', devices=1).strategy\n"
        "print(json.dumps({'names': names, 'available': available, 'chosen': chosen.name,\n"
        "                  'device': str(chosen.root_device), 'imported': 'torch_xla' in sys.modules}))\n"
    )
    result = run_processes([python_command("-c", code)], timeout=120, cwd=tmp_path).check()
    report = json.loads(result.processes[0].stdout.strip().splitlines()[-1])
    assert {"cuda", "gpu", "mps", "xpu", "xla", "tpu"} <= set(report["names"])
    assert report["imported"] is False
    if pjrt_device() == "CPU":
        assert report["available"] == [True, int(os.environ.get("CPU_NUM_DEVICES", "1"))]
        assert report["chosen"] == "single_xla" and report["device"] == "xla:0"
