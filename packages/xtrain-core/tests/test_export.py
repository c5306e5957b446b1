"""Exporting a TrainModule: ONNX checked with onnxruntime, TorchScript (script and trace), and torch.export."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from xtrain.core import ConfigError, Trainer
from xtrain.core.testing import TinyClassifier, tiny_loaders

onnxruntime = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")


def _module(trained: bool) -> TinyClassifier:
    torch.manual_seed(0)
    module = TinyClassifier(dropout=0.3)
    if trained:
        Trainer(accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                enable_model_summary=False).fit(module, tiny_loaders(n=32)[0])
    return module


def test_to_onnx_runs_in_onnxruntime_like_the_module(tmp_path: Path) -> None:
    module = _module(True)
    sample = torch.randn(5, 16)
    path = module.to_onnx(tmp_path / "model.onnx", sample)
    assert module.training, "the module is back in training mode"
    onnx.checker.check_model(onnx.load(str(path)))
    session = onnxruntime.InferenceSession(str(path))
    other = torch.randn(5, 16)
    for x in (sample, other):
        (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        with torch.no_grad():
            expected = module.eval()(x).numpy()
        module.train()
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)


def test_to_onnx_needs_an_input_sample(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="input_sample"):
        _module(False).to_onnx(tmp_path / "model.onnx")


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
@pytest.mark.parametrize("method", ["script", "trace"])
@pytest.mark.parametrize("trained", [False, True], ids=["detached", "after-fit"])
def test_to_torchscript_saves_a_loadable_program(tmp_path: Path, method: str, trained: bool) -> None:
    module = _module(trained)
    x = torch.randn(4, 16)
    module.to_torchscript(tmp_path / "model.pt", method=method, example_inputs=x)  # type: ignore[arg-type]
    loaded = torch.jit.load(str(tmp_path / "model.pt"))
    module.eval()
    assert torch.allclose(loaded(x), module(x))


def test_torch_export_is_the_modern_path() -> None:
    module = _module(True).eval()
    x = torch.randn(4, 16)
    program = torch.export.export(module, (x,))
    assert torch.allclose(program.module()(x), module(x))
