"""A third-party plugin distribution, pip-installed for real, is usable by name and passes the conformance kit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xtrain.core.testing import python_command, run_processes

pytest.importorskip("hatchling")

CONFORMANCE = '''
import torch
from xtrain_toy.accelerator import ToyAccelerator
from xtrain.core.testing import AcceleratorConformance, StrategyConformance

class TestToyAccelerator(AcceleratorConformance):
    accelerator = ToyAccelerator

class TestToyStrategy(StrategyConformance):
    strategy = "toy_single"
    accelerator = "toy"
'''

USE = '''
from xtrain.core import ConfigError, Trainer
from xtrain.core.testing import TinyClassifier, tiny_loaders
from xtrain_toy.accelerator import ToyAccelerator

trainer = Trainer(accelerator="toy", max_steps=5, logger=False, enable_checkpointing=False, enable_progress_bar=False)
assert type(trainer.strategy).__name__ == "ToySingleStrategy", trainer.strategy  # the accelerator's default strategy
trainer.fit(TinyClassifier(), tiny_loaders()[0])
assert trainer.strategy.training_steps == 5 and ToyAccelerator.setup_calls == ["cpu"]
from xtrain.core.registry import PRECISIONS
try:
    Trainer(accelerator="toy", precision="bf16-mixed")
except ConfigError as err:
    if "bf16-mixed" in PRECISIONS:  # the toy declares it cannot run bf16
        assert "not supported by accelerator='toy'" in str(err) and "'32-true'" in str(err), err
    else:
        assert "pip install xtrain-precision" in str(err), err
    print("refused:", err)
print("ok")
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    package = Path(__file__).resolve().parents[1] / "docs" / "examples" / "xtrain-toy-plugin"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(package)], check=True, timeout=300)
    return target


def env_with(site: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


def test_an_installed_plugin_is_usable_by_name(site: Path, tmp_path: Path) -> None:
    result = run_processes([python_command("-c", USE)], envs=[env_with(site)], timeout=120, cwd=tmp_path)
    assert result.returncodes == [0], result.output
    assert "ok" in result.output and "refused:" in result.output


def test_an_installed_plugin_passes_the_conformance_kit(site: Path, tmp_path: Path) -> None:
    (tmp_path / "test_toy_conformance.py").write_text(CONFORMANCE)
    result = run_processes([python_command("-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path))],
                           envs=[env_with(site)], timeout=300, cwd=tmp_path)
    assert result.returncodes == [0], result.output
    assert " passed" in result.output and " failed" not in result.output
