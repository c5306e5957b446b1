"""What a logger's ``experiment`` is on a rank other than global rank 0: an object on which everything does nothing.

Only rank 0 writes. A user's ``self.logger.experiment.log(...)`` or ``.add_scalar(...)`` in ``training_step`` runs
on every rank, though; creating the real experiment there started a second W&B run with the same id and wrote a
second TensorBoard event file (found by an outside trial). As Lightning's ``rank_zero_experiment``, other ranks get
this stand-in.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from xtrain.core.rank_zero import rank_zero_only

__all__ = ["NO_EXPERIMENT", "NoExperiment", "rank_zero_experiment"]

_T = TypeVar("_T")


class NoExperiment:
    """Any attribute, call, item or iteration: nothing happens, and the result is this object again (or empty)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # copy/pickle probes get the usual answer
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> NoExperiment:
        return self

    def __getitem__(self, key: Any) -> NoExperiment:
        return self

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def __iter__(self) -> Any:
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "NoExperiment(rank != 0: loggers write on global rank 0 only)"


NO_EXPERIMENT = NoExperiment()


def rank_zero_experiment(get: Callable[[Any], _T]) -> Callable[[Any], _T]:
    """For a logger's ``experiment`` getter: global rank 0 gets what ``get`` returns, the other ranks
    :data:`NO_EXPERIMENT` (nothing is created or written there)."""

    @functools.wraps(get)
    def experiment(self: Any) -> _T:
        return cast("_T", NO_EXPERIMENT) if rank_zero_only.rank != 0 else get(self)

    return experiment
