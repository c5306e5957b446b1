"""What the installed xtrain offers, so ``migrate`` never writes a name or an argument that would fail at run time.

The rule table says what xtrain has in general; this checks the installed packages (an older xtrain-core, or one
without xtrain-strategies). Lookups are cached: a migration of many files imports each module once.
"""

from __future__ import annotations

import importlib
import inspect
from functools import cache
from typing import Any

__all__ = ["accepts", "core_version", "exists", "names_parameter", "positional_parameters", "resolve"]


@cache
def resolve(qualified: str) -> Any:
    """The object named ``qualified`` (``"xtrain.core.Trainer"``, ``"xtrain.core.Engine.launch"``), or ``None``."""
    parts = qualified.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        except Exception:  # noqa: BLE001 - a broken optional package means "not available", not a crash
            return None
        for attr in parts[split:]:
            try:
                obj = getattr(obj, attr)
            except Exception:  # noqa: BLE001 - lazy __getattr__ of plugins may raise anything
                return None
        return obj
    return None


def exists(qualified: str) -> bool:
    return resolve(qualified) is not None


@cache
def _parameters(qualified: str) -> tuple[frozenset[str], bool] | None:
    obj = resolve(qualified)
    if obj is None:
        return None
    try:
        # A class's own signature, not ``obj.__init__``: a class without an ``__init__`` of its own would show
        # ``object.__init__(self, *args, **kwargs)`` and seem to accept any keyword (``SLURMEnvironment(x=1)``).
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return None
    names = frozenset(p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


def accepts(qualified: str, keyword: str) -> bool:
    """Whether calling ``qualified`` accepts ``keyword=`` (``True`` when it cannot be told)."""
    found = _parameters(qualified)
    if found is None:
        return True
    names, var_keyword = found
    return var_keyword or keyword in names


def names_parameter(qualified: str, name: str) -> bool:
    """Whether ``qualified`` declares a parameter ``name`` itself (not through ``**kwargs``; ``False`` when unknown)."""
    found = _parameters(qualified)
    return found is not None and name in found[0]


@cache
def positional_parameters(qualified: str) -> tuple[str, ...] | None:
    """The parameters ``qualified`` takes by position, in order (``None`` when unknown or it takes ``*args``)."""
    obj = resolve(qualified)
    if obj is None:
        return None
    try:
        params = list(inspect.signature(obj).parameters.values())  # a class: its constructor, without self
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def core_version() -> str:
    """The installed xtrain-core's version, which the keyword checks read."""
    from xtrain.core import __version__

    return str(__version__)
