"""Turning parsed configuration into objects."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["class_from_path", "instantiate"]


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
