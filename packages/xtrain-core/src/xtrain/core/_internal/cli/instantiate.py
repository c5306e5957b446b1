"""Turning parsed configuration into objects.

A config file names classes to build (``class_path``), so it is code-like; what keeps it from running arbitrary
code is that a ``class_path`` is built only where the constructor's annotation names a class, and only when the
named class is a subclass of it (as jsonargparse checks when it parses). A ``class_path`` under a parameter
annotated ``dict`` stays data; under ``Any``, ``object``, no annotation or one that does not resolve, it is refused:
``extra: {class_path: os.system, init_args: {command: ...}}`` must not call ``os.system``.
"""

from __future__ import annotations

import importlib
import inspect
import types
import typing
from collections import abc
from typing import Any

from xtrain.core.errors import ConfigError

__all__ = ["arguments_of", "class_from_path", "instantiate", "subclass_from_path"]

_DATA = (str, bytes, int, float, complex, bool, dict, list, tuple, set, frozenset, type(None), object, Any)
_UNRESOLVED = object()


def class_from_path(path: str) -> Any:
    """The class at a dotted ``path``, or a public callback, logger or profiler class by its bare name."""
    if "." not in path:
        from xtrain.core._internal.cli.known_classes import import_public_classes

        named = import_public_classes()
        if path in named:
            return named[path]
        raise ConfigError("class_path", path, "is neither a dotted import path nor a class xtrain knows by name.",
                          choices=sorted(named), fix="write the full path, e.g. my_package.module.MyClass.")
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def subclass_from_path(path: str, bases: tuple[type, ...], where: str) -> type:
    """:func:`class_from_path`, refused unless it is a class derived from one of ``bases``."""
    cls = class_from_path(path)
    if not isinstance(cls, type) or not issubclass(cls, bases):
        raise ConfigError(where, path, "is not a subclass of what the parameter takes.",
                          choices=[f"{b.__module__}.{b.__qualname__}" for b in bases],
                          fix="name a subclass of one of them.")
    return cls


def _bases(hint: Any) -> tuple[type, ...]:
    """The classes whose instances ``hint`` accepts (through ``X | None``, ``list[X]``, ``Iterable[X]``...);
    empty for data types, ``Any``, ``object``, ``type[X]`` and callables."""
    origin = typing.get_origin(hint)
    if origin is None:
        return (hint,) if isinstance(hint, type) and hint not in _DATA else ()
    if origin is typing.Annotated:
        return _bases(typing.get_args(hint)[0])
    if origin in (type, typing.Literal, abc.Callable) or _is_data(hint):
        return ()
    return tuple(base for arg in typing.get_args(hint) for base in _bases(arg))


def _is_data(hint: Any) -> bool:
    """Whether ``hint`` declares a mapping, so a ``class_path`` key in its value is the user's data."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_is_data(arg) for arg in typing.get_args(hint))
    target = origin if origin is not None else hint
    return isinstance(target, type) and issubclass(target, abc.Mapping)


def _hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of ``cls``'s constructor; an annotation that does not resolve (a name imported
    only under ``TYPE_CHECKING``) is :data:`_UNRESOLVED`, the others still resolve."""
    init: Any = cls.__init__  # type: ignore[misc]  # the class's own constructor, looked up as Python does
    try:
        return typing.get_type_hints(init)
    except Exception:  # noqa: BLE001 - one bad annotation (NameError, TypeError...): resolve the others one by one
        pass
    try:  # jsonargparse's resolver, which reads the module's TYPE_CHECKING imports as it does when parsing
        from jsonargparse._postponed_annotations import get_types

        resolved = get_types(init)
        if not any(isinstance(hint, (str, typing.ForwardRef)) for hint in resolved.values()):
            return resolved
    except Exception:  # noqa: BLE001 - a private helper of jsonargparse: absent or failing, resolve by hand
        pass
    found: dict[str, Any] = {}
    scope = getattr(init, "__globals__", {})
    for name, param in inspect.signature(init).parameters.items():
        if isinstance(param.annotation, str):
            try:
                found[name] = eval(param.annotation, scope)  # the class's own source, as get_type_hints does
            except Exception:  # noqa: BLE001 - whatever the annotation's text raises, it does not resolve
                found[name] = _UNRESOLVED
        elif param.annotation is not inspect.Parameter.empty:
            found[name] = param.annotation
    return found


def _fields(value: Any) -> dict[str, Any]:
    """A jsonargparse ``Namespace`` or a dict as a dict of its own keys (nested ones stay as they are)."""
    return dict(vars(value)) if not isinstance(value, dict) else dict(value)


def _is_class_node(value: Any) -> bool:
    return (isinstance(value, dict) or hasattr(value, "as_dict")) and "class_path" in _fields(value)


def _plain(value: Any) -> Any:
    return value.as_dict() if hasattr(value, "as_dict") else value


def _build(value: Any, hint: Any, where: str) -> Any:
    if _is_class_node(value):
        fields = _fields(value)
        path = fields["class_path"]
        if hint is not _UNRESOLVED and _is_data(hint):
            return _plain(value)
        bases = () if hint is _UNRESOLVED else _bases(hint)
        if not bases:
            what = "an annotation that does not resolve" if hint is _UNRESOLVED else f"annotated {hint!r}"
            raise ConfigError(where, path, f"is a class_path for a parameter with {what}: xtrain builds a class_path "
                              "only where the constructor's annotation names a class, so that a config file cannot "
                              "call anything else.", fix=f"annotate the parameter with the class it takes (e.g. "
                              f"'backbone: torch.nn.Module', importable at run time), or give {where} plain values.")
        cls = subclass_from_path(path, bases, where)
        return cls(**_arguments(cls, fields.get("init_args"), f"{where}.init_args."))
    if isinstance(value, list):
        item = _element(hint) if hint is not _UNRESOLVED else hint
        return [_build(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def _is_container(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    return (isinstance(origin, type) and issubclass(origin, abc.Iterable)
            and not issubclass(origin, (str, bytes, abc.Mapping)))


def _element(hint: Any) -> Any:
    """What the items of a list given for ``hint`` are: ``X`` for ``list[X]``, ``Iterable[X]``, ``X | list[X]``..."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        items = [_element(arg) for arg in typing.get_args(hint) if _is_container(arg)]
        return typing.Union[tuple(items)] if items else hint  # noqa: UP007 - built from a tuple of types
    if _is_container(hint):
        args = tuple(arg for arg in typing.get_args(hint) if arg is not Ellipsis)
        return typing.Union[args] if args else Any  # noqa: UP007
    return hint


def _arguments(cls: Any, args: Any, prefix: str) -> dict[str, Any]:
    hints = _hints(cls)
    return {k: _build(v, hints.get(k, _UNRESOLVED), prefix + k) for k, v in _fields(args or {}).items()}


def instantiate(cfg: Any, *, base: type, where: str) -> Any:
    """Build the object a ``class_path``/``init_args`` config (``cfg``, a jsonargparse ``Namespace`` or a dict)
    describes, which must be a subclass of ``base``; ``where`` is its config key, for messages (``model``)."""
    return _build(cfg, base, where)


def arguments_of(cls: Any, cfg: Any, *, where: str) -> dict[str, Any]:
    """The keyword arguments of ``cls``'s constructor that ``cfg`` holds, their ``class_path`` values built as
    ``cls``'s annotations allow; ``where`` is the config key (``trainer``)."""
    return _arguments(cls, cfg, f"{where}.")
