"""Turning parsed configuration into objects, and saving it beside the run."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from xtrain.core.callbacks.callback import Callback

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["SaveConfig", "class_from_path", "instantiate"]


def class_from_path(path: str) -> Any:
    """The class at a dotted ``path``, or a public callback, logger or profiler class by its bare name."""
    if "." not in path:
        from xtrain.core._internal.cli.known_classes import import_public_classes

        named = import_public_classes()
        if path in named:
            return named[path]
        from xtrain.core.errors import ConfigError

        raise ConfigError("class_path", path, "is neither a dotted import path nor a class xtrain knows by name.",
                          choices=sorted(named), fix="write the full path, e.g. my_package.module.MyClass.")
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _build(value: Any) -> Any:
    """Instantiate nested ``{"class_path", "init_args"}`` dicts; leave everything else as is."""
    if isinstance(value, dict) and "class_path" in value:
        kwargs = {k: _build(v) for k, v in (value.get("init_args") or {}).items()}
        return class_from_path(value["class_path"])(**kwargs)
    if isinstance(value, list):
        return [_build(v) for v in value]
    return value


def instantiate(cfg: Any, *, as_kwargs: bool = False) -> Any:
    """Build the object a ``class_path``/``init_args`` config describes (or, with ``as_kwargs``, a kwargs dict)."""
    data = cfg.as_dict() if hasattr(cfg, "as_dict") else dict(cfg)
    if as_kwargs:
        return {k: _build(v) for k, v in data.items()}
    return _build(data)


class SaveConfig(Callback):
    """Writes the resolved configuration to ``<log_dir>/config.yaml`` on global rank 0 when the run starts."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.path: Path | None = None

    @property
    @override
    def state_key(self) -> str:
        return "SaveConfig"

    def _save(self, trainer: Trainer) -> None:
        if trainer.is_global_zero:
            self.path = Path(trainer.log_dir) / "config.yaml"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(self.text)

    @override
    def on_fit_start(self, trainer: Trainer, module: TrainModule) -> None:
        self._save(trainer)
