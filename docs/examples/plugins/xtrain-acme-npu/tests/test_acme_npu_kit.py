import os

import pytest
from xtrain_acme_npu.accelerator import AcmeNPUAccelerator

from xtrain.core.testing import AcceleratorConformance


@pytest.fixture(autouse=True)
def two_npus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_NPU_COUNT", "2")  # the simulated driver: two chips, in this process and its children


class TestAcmeNPU(AcceleratorConformance):
    accelerator = AcmeNPUAccelerator


def test_the_error_says_how_to_make_it_available(monkeypatch: pytest.MonkeyPatch) -> None:
    from xtrain.core import ConfigError, Trainer

    monkeypatch.delenv("ACME_NPU_COUNT")
    with pytest.raises(ConfigError, match="export ACME_NPU_COUNT=<number of NPUs>"):
        Trainer(accelerator="acme_npu")
    assert "ACME_NPU_COUNT" not in os.environ
