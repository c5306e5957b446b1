"""``xtrain plugin new``: the scaffolded package installs, registers its name and passes its own kit test."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xtrain.core import ConfigError
from xtrain.core._internal.cli.plugin_new import new_plugin
from xtrain.core.testing import python_command, run_processes

pytest.importorskip("hatchling")


def test_a_scaffolded_accelerator_installs_and_passes_its_kit(tmp_path: Path) -> None:
    started = time.perf_counter()
    scaffold = run_processes([python_command("-c", "from xtrain.core.cli import main; raise SystemExit(main())",
                                             "plugin", "new", "accelerator", "acme_npu", "--directory", str(tmp_path))],
                             timeout=120, cwd=tmp_path)
    assert scaffold.returncodes == [0], scaffold.output
    root = tmp_path / "xtrain-acme-npu"
    assert f"created {root}" in scaffold.output
    pyproject = (root / "pyproject.toml").read_text()
    assert '[project.entry-points."xtrain.accelerators"]' in pyproject
    assert '"acme_npu" = "xtrain_acme_npu.accelerator:AcmeNpuAccelerator"' in pyproject
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(root)], check=True, timeout=300)
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    kit = run_processes([python_command("-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests"))],
                        envs=[env], timeout=300, cwd=root)
    elapsed = time.perf_counter() - started
    assert kit.returncodes == [0], kit.output
    assert " passed" in kit.output and "failed" not in kit.output and "skipped" not in kit.output, kit.output
    print(f"scaffold to passing kit: {elapsed:.1f} s")


@pytest.mark.parametrize("kind", ["strategy", "precision"])
def test_every_kind_writes_a_package_with_its_entry_point_and_kit_test(tmp_path: Path, kind: str) -> None:
    root = new_plugin(kind, "acme-thing", tmp_path)
    group = {"strategy": "xtrain.strategies", "precision": "xtrain.precision"}[kind]
    assert f'[project.entry-points."{group}"]' in (root / "pyproject.toml").read_text()
    source = (root / "src" / "xtrain_acme_thing" / f"{kind}.py").read_text()
    compile(source, f"{kind}.py", "exec")
    assert "Conformance" in (root / "tests" / "test_xtrain_acme_thing_conformance.py").read_text()


def test_names_taken_or_invalid_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"name='cpu': is already registered \(a accelerator\) by xtrain-core"):
        new_plugin("accelerator", "cpu", tmp_path)
    with pytest.raises(ConfigError, match="name='Bad Name'"):
        new_plugin("accelerator", "Bad Name", tmp_path)
    with pytest.raises(ConfigError, match="kind='loss'"):
        new_plugin("loss", "x1", tmp_path)
    new_plugin("precision", "x1", tmp_path)
    with pytest.raises(ConfigError, match="exists already"):
        new_plugin("precision", "x1", tmp_path)
