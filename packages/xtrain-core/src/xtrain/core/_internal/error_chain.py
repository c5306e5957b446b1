"""Looking through an exception and the ones it was raised from (``__cause__``, else ``__context__``)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["in_chain"]

_LINKS = 8  # a chain longer than this is not a collective's error wrapped by torch and xtrain


def in_chain(error: BaseException, matches: Callable[[BaseException], bool]) -> bool:
    """Whether ``error`` or one of the exceptions it was raised from (at most :data:`_LINKS` of them) ``matches``:
    a collective's failure reaches the caller wrapped (a RuntimeError over gloo's, a DistBackendError over NCCL's)."""
    seen: BaseException | None = error
    for _ in range(_LINKS):
        if seen is None:
            return False
        if matches(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
