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
    path = tmp_path / "sub" / "model.onnx"
    program = module.to_onnx(path, sample)
    assert type(program).__name__ == "ONNXProgram", "as Lightning's: torch.onnx.export's result is returned"
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


def test_to_onnx_takes_a_file_object_or_no_file_as_lightnings() -> None:
    """Lightning's ``file_path`` is optional and may be a ``BytesIO`` (a raw TypeError before)."""
    import io

    module, sample = _module(False), torch.randn(3, 16)
    buffer = io.BytesIO()
    module.to_onnx(buffer, sample)
    onnx.checker.check_model(onnx.load_from_string(buffer.getvalue()))
    program = module.to_onnx(None, sample)
    assert program is not None and program.model_proto.graph.node
    with pytest.raises(ConfigError, match="file_path=None: is needed by to_onnx\\(dynamo=False\\)"):
        module.to_onnx(None, sample, dynamo=False)


def test_to_torchscript_trace_without_input_names_example_inputs() -> None:
    """The fix the message gives is the argument to_torchscript takes (it named to_onnx's input_sample)."""
    with pytest.raises(ConfigError, match=r"example_inputs=None: .*Fix: pass module.to_torchscript\(\.\.\., "
                                          r"example_inputs="):
        _module(False).to_torchscript(method="trace")


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
