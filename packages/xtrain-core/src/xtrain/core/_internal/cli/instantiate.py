"""Turning parsed configuration into objects.

A config file names classes to build (``class_path``), so it is code-like; what keeps it from running arbitrary
code is that a ``class_path`` is built only where the constructor's annotation names a class, and only when the
named class is a subclass of it (as jsonargparse checks when it parses). A ``class_path`` under a parameter
annotated ``dict`` stays data; under ``Any``, ``object``, no annotation or one that does not resolve, it is refused:
``extra: {class_path: os.system, init_args: {command: ...}}`` must not call ``os.system``.

The same rule, through the shapes jsonargparse parses (as LightningCLI builds them):

- ``Callable[..., R]`` with ``R`` a class (Lightning's ``OptimizerCallable``): a ``class_path`` of a subclass of ``R``
  becomes a callable that builds it with its ``init_args`` (the callable's own arguments first); a bare ``Callable``
  (``typing`` or ``collections.abc``) names no class, so a ``class_path`` under it is refused;
- ``X | dict``: a ``class_path`` naming a subclass of ``X`` is built, any other stays data;
- ``dict[str, X]``, ``list[X]``, ``tuple[X, ...]``: their values are built as ``X`` is;
- a dataclass annotation builds that dataclass from its fields;
- ``dict_kwargs`` beside ``init_args`` (a class taking ``**kwargs``) are passed as keyword arguments, as data.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import types
import typing
from collections import abc
from typing import Any

from xtrain.core.errors import ConfigError

__all__ = ["ClassFactory", "arguments_of", "class_from_path", "instantiate", "subclass_from_path"]

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
        return (hint,) if isinstance(hint, type) and hint not in _DATA and hint is not abc.Callable else ()
    if origin is typing.Annotated:
        return _bases(typing.get_args(hint)[0])
    if origin in (type, typing.Literal, abc.Callable) or (
            origin not in (typing.Union, types.UnionType) and _is_data(hint)):
        return ()  # a union is judged member by member: X | dict names X
    return tuple(base for arg in typing.get_args(hint) for base in _bases(arg))


def _members(hint: Any) -> list[Any]:
    """The members of a union ``hint`` (through ``Annotated``), or ``[hint]``."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _members(typing.get_args(hint)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(hint) for m in _members(arg)]
    return [hint]


def _returns(hint: Any) -> tuple[type, ...]:
    """The classes ``R`` of the ``Callable[..., R]`` members of ``hint``: a ``class_path`` of a subclass of one
    becomes a callable that builds it (jsonargparse's reading of Lightning's ``OptimizerCallable``)."""
    found: list[type] = []
    for member in _members(hint):
        args = typing.get_args(member)
        if typing.get_origin(member) is abc.Callable and args:
            found += _bases(args[-1])
    return tuple(found)


def _dataclass(hint: Any) -> type | None:
    """The dataclass ``hint`` names (``Conf`` or ``Conf | None``), which a config's fields build."""
    return next((m for m in _members(hint) if isinstance(m, type) and dataclasses.is_dataclass(m)), None)


def _mapping_values(hint: Any) -> Any:
    """``X`` for a ``dict[str, X]`` (``Mapping[str, X]``...) member of ``hint``, when ``X`` names a class to build;
    else ``None`` (a plain ``dict``, ``dict[str, Any]``: data)."""
    for member in _members(hint):
        origin, args = typing.get_origin(member), typing.get_args(member)
        if isinstance(origin, type) and issubclass(origin, abc.Mapping) and len(args) == 2:
            value = args[1]
            if _bases(value) or _returns(value) or _dataclass(value) or _mapping_values(value) is not None or (
                    _is_container(value) and (_bases(_element(value)) or _returns(_element(value)))):
                return value
    return None


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
    """A jsonargparse ``Namespace`` or a dict as a dict of its own keys (nested ones stay as they are), less the
    ``__path__`` jsonargparse records for a part read from a file of its own (``trainer: trainer.yaml``)."""
    fields = dict(vars(value)) if not isinstance(value, dict) else dict(value)
    fields.pop("__path__", None)
    return fields


def _is_class_node(value: Any) -> bool:
    return (isinstance(value, dict) or hasattr(value, "as_dict")) and "class_path" in _fields(value)


def _plain(value: Any) -> Any:
    return value.as_dict() if hasattr(value, "as_dict") else value


class ClassFactory:
    """What a ``class_path`` given to a ``Callable[..., R]`` parameter becomes: calling it builds the class with the
    call's arguments and the config's ``init_args`` (jsonargparse's and LightningCLI's ``OptimizerCallable``)."""

    def __init__(self, cls: type, kwargs: dict[str, Any]) -> None:
        self.cls, self.kwargs = cls, kwargs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.cls(*args, **{**self.kwargs, **kwargs})

    def __repr__(self) -> str:
        return f"ClassFactory({self.cls.__module__}.{self.cls.__qualname__}, **{self.kwargs!r})"


def _matching(path: str, bases: tuple[type, ...]) -> type | None:
    """The class at ``path`` if it derives from one of ``bases``, else ``None`` (for a value that may be data)."""
    if not bases:
        return None
    try:
        cls = class_from_path(path)
    except Exception:  # noqa: BLE001 - a path that does not import is the user's data, as under a plain dict
        return None
    return cls if isinstance(cls, type) and issubclass(cls, bases) else None


def _build(value: Any, hint: Any, where: str) -> Any:
    if _is_class_node(value):
        fields = _fields(value)
        path = fields["class_path"]
        bases = () if hint is _UNRESOLVED else _bases(hint)
        returns = () if hint is _UNRESOLVED else _returns(hint)
        if hint is not _UNRESOLVED and _is_data(hint):
            found = _matching(path, bases + returns)  # X | dict: built as X where it names a subclass of X
            if found is None:
                return _plain(value)
            cls = found
        elif not bases and not returns:
            what = "an annotation that does not resolve" if hint is _UNRESOLVED else f"annotated {hint!r}"
            raise ConfigError(where, path, f"is a class_path for a parameter with {what}: xtrain builds a class_path "
                              "only where the constructor's annotation names a class, so that a config file cannot "
                              "call anything else.", fix=f"annotate the parameter with the class it takes (e.g. "
                              f"'backbone: torch.nn.Module', importable at run time), or give {where} plain values.")
        else:
            cls = subclass_from_path(path, bases + returns, where)
        kwargs = _arguments(cls, fields.get("init_args"), f"{where}.init_args.")
        extra = fields.get("dict_kwargs")
        kwargs.update({str(k): _plain(v) for k, v in _fields(extra).items()} if extra else {})
        if bases and issubclass(cls, bases):
            return cls(**kwargs)
        return ClassFactory(cls, kwargs)
    if hint is _UNRESOLVED:
        return [_build(v, hint, f"{where}[{i}]") for i, v in enumerate(value)] if isinstance(value, list) else value
    if isinstance(value, (list, tuple)):
        item = _element(hint)
        built = [_build(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(built) if isinstance(value, tuple) else built
    if isinstance(value, dict):
        values = _mapping_values(hint)
        return value if values is None else {k: _build(v, values, f"{where}.{k}") for k, v in value.items()}
    if hasattr(value, "as_dict"):  # a jsonargparse Namespace without class_path: the fields of a dataclass
        data = _dataclass(hint)
        if data is not None:
            return data(**_arguments(data, value, f"{where}."))
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
