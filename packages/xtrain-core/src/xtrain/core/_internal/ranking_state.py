"""The ranking a ModelCheckpoint restores from a checkpoint file, read as the plain values the callback keeps.

The file may be hostile or damaged: a score that is a string or a vector passed the restore and failed at the run's
next save (``'>' not supported between 'float' and 'str'``), after the weights had been replaced. Refusing here,
inside ``load_state_dict``, lets the restore roll everything back and name the file. Lightning's own checkpoints keep
the scores as 0-d tensors; those are read as floats.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["Ranking", "read_ranking"]


class Ranking:
    """The restored fields, checked: file -> score maps, the best score and the monitored value at the last save."""

    __slots__ = ("best_k_models", "best_score", "current_score", "paths", "recent")

    def __init__(self, best_k_models: dict[str, float], recent: dict[str, float], best_score: float | None,
                 current_score: float | None, paths: dict[str, str]) -> None:
        self.best_k_models, self.recent = best_k_models, recent
        self.best_score, self.current_score = best_score, current_score
        self.paths = paths


def read_ranking(state: dict[str, Any]) -> Ranking:
    """Check and convert ModelCheckpoint's saved ``state``.

    Raises:
        ValueError: A field of another kind, naming the field and the value's type.
    """
    best = _scores("best_k_models", state.get("best_k_models", {}))
    recent = _scores("recent", state.get("recent", {}))
    paths = {}
    for field in ("best_model_path", "last_model_path"):
        value = state.get(field, "")
        if not isinstance(value, str):
            raise ValueError(f"ModelCheckpoint state {field!r} is a {type(value).__name__}, not a path")
        paths[field] = value
    return Ranking(best, recent, _score("best_model_score", state.get("best_model_score"), optional=True),
                   _score("current_score", state.get("current_score"), optional=True), paths)


def _scores(field: str, value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        raise ValueError(f"ModelCheckpoint state {field!r} is a {type(value).__name__}, not a dict of file -> score")
    out: dict[str, float] = {}
    for path, score in value.items():
        if not isinstance(path, str):
            raise ValueError(f"ModelCheckpoint state {field!r} has a key of type {type(path).__name__}, not a path")
        number = _score(f"{field}[{path!r}]", score, optional=False)
        assert number is not None
        out[path] = number
    return out


def _score(field: str, value: Any, *, optional: bool) -> float | None:
    """A number, or a one-element tensor (Lightning's scores); NaN is refused, as a NaN score is never ranked."""
    if value is None and optional:
        return None
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex() and not value.is_meta:
        number = float(value.reshape(()).item())
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        kind = f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else \
            f"a {type(value).__name__}"
        raise ValueError(f"ModelCheckpoint state {field} is {kind}, not a score (a number)")
    if math.isnan(number):
        raise ValueError(f"ModelCheckpoint state {field} is NaN: a NaN score is never ranked")
    return number
