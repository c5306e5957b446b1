"""``load_from_checkpoint`` on entries a hostile file can hold: every refusal names the file.

A Namespace rebuilt from keys that are not strings raised a raw ``TypeError`` (``keywords must be strings``), and
the messages for a non-dict entry or a non-string ``hparams_name`` did not say which file; the data module's entries
(``datamodule_...``) go through the same path. A complex or integer tensor for a float weight was cast by torch's
``load_state_dict`` (the imaginary part dropped) where ``fit``'s restore refuses it; both now check the same way.
"""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import CheckpointError, DataModule
from xtrain.core.defaults.torch_io import save_file
from xtrain.core.testing import TinyClassifier


class Configured(TinyClassifier):
    def __init__(self, cfg: Namespace | None = None) -> None:
        super().__init__()
        self.cfg = cfg


class ConfiguredData(DataModule):
    def __init__(self, cfg: Namespace | None = None) -> None:
        super().__init__()
        self.cfg = cfg


EDITS = [
    ({"hyper_parameters": {1: 2}, "hparams_name": "cfg", "hparams_type": "Namespace"},
     r"hyper_parameters has keys that are not argument names \(1\)"),
    ({"hyper_parameters": {1: 2}}, r"hyper_parameters has keys that are not argument names \(1\)"),
    ({"hyper_parameters": [1]}, r"hyper_parameters is a list, not a dict"),
    ({"hyper_parameters": torch.ones(3)}, r"hyper_parameters is a Tensor, not a dict"),
    ({"hparams_name": 5}, r"hparams_name is a int, not the name of an __init__ argument"),
]


def _saved(tmp_path: Path, edit: dict[str, Any], prefix: str) -> Path:
    checkpoint = {"state_dict": TinyClassifier().state_dict(), "hyper_parameters": {}}
    checkpoint.update({f"{prefix}{key}": value for key, value in edit.items()})
    path = tmp_path / "edited.ckpt"
    save_file(checkpoint, path)
    return path


@pytest.mark.parametrize(("edit", "expected"), EDITS, ids=["namespace-int-key", "int-key", "list", "tensor", "name"])
def test_module_refusals_name_the_file(edit: dict[str, Any], expected: str, tmp_path: Path) -> None:
    path = _saved(tmp_path, edit, "")
    with pytest.raises(CheckpointError, match=expected) as info:
        Configured.load_from_checkpoint(path)
    assert f"checkpoint {str(path)!r}" in str(info.value)


@pytest.mark.parametrize(("edit", "expected"), EDITS, ids=["namespace-int-key", "int-key", "list", "tensor", "name"])
def test_datamodule_refusals_name_the_file(edit: dict[str, Any], expected: str, tmp_path: Path) -> None:
    path = _saved(tmp_path, edit, "datamodule_")
    with pytest.raises(CheckpointError, match=expected.replace("hyper_parameters", "datamodule_hyper_parameters")
                       .replace("hparams_name", "datamodule_hparams_name")) as info:
        ConfiguredData.load_from_checkpoint(path)
    assert f"checkpoint {str(path)!r}" in str(info.value)


@pytest.mark.parametrize("prefix", ["", "datamodule_"])
def test_a_genuine_namespace_still_rebuilds(prefix: str, tmp_path: Path) -> None:
    path = _saved(tmp_path, {"hyper_parameters": {"a": 1}, "hparams_name": "cfg", "hparams_type": "Namespace"},
                  prefix)
    built = (ConfiguredData if prefix else Configured).load_from_checkpoint(path)
    assert built.cfg == Namespace(a=1)


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("dtype", [torch.complex64, torch.int64])
def test_a_weight_of_another_kind_of_number_is_refused(dtype: torch.dtype, strict: bool, tmp_path: Path) -> None:
    state = TinyClassifier().state_dict()
    state["net.0.weight"] = state["net.0.weight"].to(dtype)
    path = tmp_path / "kind.ckpt"
    save_file({"state_dict": state, "hyper_parameters": {}}, path)
    with pytest.raises(CheckpointError, match=rf"net.0.weight: checkpoint {dtype} vs model torch.float32") as info:
        TinyClassifier.load_from_checkpoint(path, strict=strict)
    message = str(info.value)
    assert f"checkpoint {str(path)!r} does not fit TinyClassifier; nothing was loaded" in message
    assert ("strict=False" in message) is strict


def test_a_float_weight_of_another_precision_still_loads(tmp_path: Path) -> None:
    state = TinyClassifier().state_dict()
    path = tmp_path / "double.ckpt"
    save_file({"state_dict": {k: v.double() for k, v in state.items()}, "hyper_parameters": {}}, path)
    loaded = TinyClassifier.load_from_checkpoint(path)
    assert all(v.dtype == torch.float32 for v in loaded.state_dict().values())
    assert torch.equal(loaded.state_dict()["net.0.weight"], state["net.0.weight"])
