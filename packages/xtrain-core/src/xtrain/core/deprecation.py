"""Deprecating public API: a warning that names when it was deprecated, when it goes, and what to use instead.

xtrain's own test suite turns :class:`~xtrain.core.errors.XtrainDeprecationWarning` into an error, so no package of
ours keeps using something it deprecated.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from xtrain.core.errors import XtrainDeprecationWarning

__all__ = ["deprecated", "warn_deprecated"]

_F = TypeVar("_F", bound=Callable[..., Any])


def warn_deprecated(what: str, *, since: str, removal: str, alternative: str | None = None,
                    stacklevel: int = 3) -> None:
    """Warn that ``what`` is deprecated since version ``since`` and will be removed in ``removal``."""
    message = f"{what} is deprecated since {since} and will be removed in {removal}."
    if alternative:
        message += f" Use {alternative} instead."
    warnings.warn(message, XtrainDeprecationWarning, stacklevel=stacklevel)


def deprecated(*, since: str, removal: str, alternative: str | None = None) -> Callable[[_F], _F]:
    """Decorate a function or method so that calling it warns (see :func:`warn_deprecated`)."""

    def decorate(fn: _F) -> _F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            warn_deprecated(f"{fn.__qualname__}()", since=since, removal=removal, alternative=alternative)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
