"""Genuine checkpoints of a tiny run, in both layouts, for the security, restore and fuzz tests to damage."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from xtrain.core import Engine, Trainer, seed_everything
from xtrain.core._internal.integrity import file_checksum
from xtrain.core._internal.safe_metadata import load_metadata
from xtrain.core.sharded_checkpoint import MANIFEST_FILE
from xtrain.core.sharded_saver import ShardedSaver
from xtrain.core.testing import TinyClassifier, tiny_loaders

MARKER_ENV = "XTRAIN_PWNED"


class Payload:
    """Unpickling this runs a shell command that creates the marker file."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {os.environ[MARKER_ENV]}",))


class WrappedPayload:
    """Runs the payload, then returns the genuine object, so a load would complete normally."""

    def __init__(self, genuine: bytes) -> None:
        self.genuine = genuine

    def __reduce__(self) -> tuple[Any, ...]:
        code = (f"__import__('os').system('touch {os.environ[MARKER_ENV]}') or "
                f"__import__('pickle').loads({self.genuine!r})")
        return (eval, (code,))


def quiet_trainer(root: Path, **kwargs: Any) -> Trainer:
    options: dict[str, Any] = {"default_root_dir": root, "enable_progress_bar": False, "enable_model_summary": False,
                               "logger": False, "max_steps": 2}
    return Trainer(**{**options, **kwargs})


def train_full(root: Path, *, module: TinyClassifier | None = None, max_steps: int = 2) -> tuple[Path, TinyClassifier]:
    """A genuine full checkpoint after ``max_steps`` steps, and the module that wrote it."""
    seed_everything(3)
    module = module or TinyClassifier()
    quiet_trainer(root, max_steps=max_steps).fit(module, tiny_loaders(n=64)[0])
    return root / "checkpoints" / "last.ckpt", module


def to_sharded(full: Path, target: Path) -> Path:
    """The same checkpoint written as a sharded directory (single process, the saver FSDP uses)."""
    engine = Engine(accelerator="cpu", devices=1)
    engine.launch()
    checkpoint = torch.load(full, weights_only=True)
    ShardedSaver(engine.strategy).save(checkpoint, target)
    return target


def data_dir(path: Path) -> Path:
    return path / json.loads((path / MANIFEST_FILE).read_text())["data"]


def manifest(path: Path) -> dict[str, Any]:
    return json.loads((path / MANIFEST_FILE).read_text())  # type: ignore[no-any-return]


def write_manifest_file(path: Path, content: dict[str, Any]) -> None:
    (path / MANIFEST_FILE).write_text(json.dumps(content))


def rehash(path: Path) -> None:
    """Recompute the manifest's checksums after a change: what an attacker who edits the files would do."""
    content = manifest(path)
    data = path / content["data"]
    content["xtrain"]["checksums"]["files"] = {
        name: list(file_checksum(data / name)) for name in content["xtrain"]["checksums"]["files"]
        if (data / name).exists()}
    write_manifest_file(path, content)


def metadata(path: Path) -> Any:
    return load_metadata(data_dir(path) / ".metadata", checkpoint=str(path))
