"""A third party registers a new precision name from its own distribution, and it works like a first-party one.

``example_precision/`` is a separate project whose ``pyproject.toml`` declares one ``xtrain.precision`` entry point.
It is pip-installed for real (``--target`` a temporary site directory put on ``sys.path`` and ``PYTHONPATH``, so the
test venv is left as it was and the conformance kit's training subprocess sees it too).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from xtrain.core import ConfigError, Trainer, seed_everything
from xtrain.core.defaults import SingleDeviceStrategy
from xtrain.core.registry import PRECISIONS, all_registries
from xtrain.core.testing import PrecisionConformance, TinyClassifier, tiny_loaders

EXAMPLE = Path(__file__).parent / "example_precision"
pytestmark = pytest.mark.usefixtures("example_installed")


@pytest.fixture(scope="module")
def example_installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    site = tmp_path_factory.mktemp("third-party-site")
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
               "--target", str(site), str(EXAMPLE)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"
    assert list(site.glob("xtrain_example_tf32-0.1.0.dist-info/entry_points.txt"))
    saved_path = os.environ.get("PYTHONPATH")
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site), *([saved_path] if saved_path else [])])
    for registry in all_registries():
        registry.refresh()
    yield site
    sys.path.remove(str(site))
    if saved_path is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = saved_path
    for registry in all_registries():
        registry.refresh()


class TestExampleTF32Precision(PrecisionConformance):
    precision = "tf32"
    expected_param_dtype = torch.float32
    expected_activation_dtype = torch.float32


class MatmulRecorder(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.levels: set[str] = set()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.levels.add(torch.get_float32_matmul_precision())
        return super().training_step(batch, batch_idx)


def test_trainer_uses_the_new_name() -> None:
    assert "tf32" in PRECISIONS.names()
    assert PRECISIONS.distribution_of("tf32") == "xtrain-example-tf32"
    seed_everything(0)
    module = MatmulRecorder()
    trainer = Trainer(precision="tf32", max_steps=8, logger=False, enable_progress_bar=False,
                      enable_checkpointing=False, enable_model_summary=False)
    assert type(trainer.strategy.precision).__module__ == "xtrain_example_tf32"
    trainer.fit(module, tiny_loaders()[0])
    assert module.levels == {"high"}
    assert torch.get_float32_matmul_precision() == "highest", "the precision leaked its setting out of the step"
    assert module.losses[-1] < module.losses[0]


class TF32OnlyStrategy(SingleDeviceStrategy):
    name: ClassVar[str] = "tf32_only"
    supported_precisions: ClassVar[frozenset[str] | None] = frozenset({"tf32"})


def test_declared_capabilities_include_third_party_names() -> None:
    assert Trainer(strategy=TF32OnlyStrategy(), precision="tf32", logger=False).strategy.precision.name == "tf32"
    with pytest.raises(ConfigError, match=r"is not supported by strategy='tf32_only'\. Valid choices: 'tf32'\."):
        Trainer(strategy=TF32OnlyStrategy(), precision="bf16-mixed", logger=False)
