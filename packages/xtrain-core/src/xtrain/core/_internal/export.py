"""Exporting a TrainModule for inference: ONNX (through ``torch.export``), TorchScript, and ``torch.export`` itself.

``TrainModule.to_onnx`` and ``TrainModule.to_torchscript`` are thin methods over these functions. The module is
exported in eval mode (dropout off, batch norm on its running statistics) and put back in its mode afterwards.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

import torch

from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule

__all__ = ["export_program", "to_onnx", "to_torchscript"]


class _Detached:
    """Stands in for a missing Trainer while torch inspects the module: every attribute is missing, so the module's
    Trainer-backed properties look absent instead of raising."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


@contextmanager
def _exporting(module: TrainModule) -> Iterator[None]:
    modes = [(m, m.training) for m in module.modules()]
    detached = module._trainer is None
    if detached:
        module._trainer = _Detached()  # type: ignore[assignment]
    module.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training
        if detached:
            module._trainer = None


def _sample(module: TrainModule, input_sample: Any, method: str, argument: str = "input_sample") -> tuple[Any, ...]:
    sample = input_sample if input_sample is not None else getattr(module, "example_input_array", None)
    if sample is None:
        raise ConfigError(argument, None, f"is needed by {method}: the module has no example_input_array.",
                          fix=f"pass module.{method}(..., {argument}=torch.randn(1, ...)) or set "
                              "self.example_input_array.")
    return sample if isinstance(sample, tuple) else (sample,)


def export_program(module: TrainModule, input_sample: Any = None, **kwargs: Any) -> torch.export.ExportedProgram:
    """``torch.export.export`` of the module in eval mode: the graph-captured program to serve, compile or lower."""
    args = _sample(module, input_sample, "export")
    with _exporting(module):
        return torch.export.export(module, args, **kwargs)


def to_onnx(module: TrainModule, file_path: str | Path | BinaryIO | None = None, input_sample: Any = None,
            **kwargs: Any) -> Any:
    """Export the module as an ONNX model with ``torch.onnx.export`` (its ``torch.export``-based exporter).

    As Lightning's: ``file_path`` is a path, a binary file object, or ``None`` (no file: use the returned program),
    and the result is what ``torch.onnx.export`` returns, an ``ONNXProgram`` (``None`` with ``dynamo=False``). Needs
    ``onnx`` and ``onnxscript``: ``pip install "xtrain-core[onnx]"`` (which also brings ``onnxruntime`` to run the
    file). ``kwargs`` go to ``torch.onnx.export`` (``dynamic_shapes``, ``opset_version``, ``dynamo=False`` for the
    legacy TorchScript-based exporter...).
    """
    missing = [name for name in ("onnx", "onnxscript") if importlib.util.find_spec(name) is None]
    if missing and kwargs.get("dynamo", True):
        raise ConfigError("to_onnx", str(file_path), f"needs {' and '.join(missing)}, which is not installed.",
                          fix='pip install "xtrain-core[onnx]"')
    args = _sample(module, input_sample, "to_onnx")
    target: str | BinaryIO | None
    if isinstance(file_path, (str, os.PathLike)):
        Path(file_path).parent.mkdir(parents=True, exist_ok=True)
        target = os.fspath(file_path)
    else:
        target = file_path
    kwargs.setdefault("dynamo", True)
    if kwargs["dynamo"]:
        kwargs.setdefault("verbose", False)
    elif target is None:
        raise ConfigError("file_path", None, "is needed by to_onnx(dynamo=False): the legacy exporter returns no "
                          "program, only writes the file.", fix="pass a path or a file object, or leave dynamo=True.")
    with _exporting(module):
        return torch.onnx.export(module, args, target, **kwargs)  # type: ignore[arg-type]  # torch takes a file too


def to_torchscript(module: TrainModule, file_path: str | Path | None = None,
                   method: Literal["script", "trace"] = "script", example_inputs: Any = None,
                   **kwargs: Any) -> torch.jit.ScriptModule:
    """Compile the module with ``torch.jit.script`` (or ``torch.jit.trace`` on ``example_inputs``) and save it to
    ``file_path`` when given. TorchScript is in maintenance in torch; prefer :func:`export_program` for new work."""
    if method not in ("script", "trace"):
        raise ConfigError("method", method, "is not a TorchScript method.", choices=["script", "trace"],
                          fix="write method='script'.")
    with _exporting(module):
        if method == "script":
            compiled = torch.jit.script(module, **kwargs)
        else:
            compiled = torch.jit.trace(module, _sample(module, example_inputs, "to_torchscript", "example_inputs"),
                                       **kwargs)
    if file_path is not None:
        Path(file_path).parent.mkdir(parents=True, exist_ok=True)
        torch.jit.save(compiled, str(file_path))
    return compiled  # type: ignore[no-any-return]
