"""``save_hyperparameters()``: record the constructor arguments of a module or data module."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterable
from types import FrameType
from typing import Any

import torch

__all__ = ["AttributeDict", "HyperparametersMixin", "checkpoint_safe", "collect_init_args"]


class AttributeDict(dict[str, Any]):
    """A dict whose keys are also attributes: ``hparams.lr``."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as err:
            raise AttributeError(key) from err

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


def collect_init_args(frame: FrameType, obj: object, names: Iterable[str], ignore: Iterable[str]) -> dict[str, Any]:
    """The arguments of the ``__init__`` running in ``frame`` (the caller of ``save_hyperparameters``).

    They are read from that frame's own code, so a subclass whose ``__init__`` takes other arguments does not hide
    the arguments of the parent ``__init__`` that called ``save_hyperparameters``.
    """
    code, local = frame.f_code, frame.f_locals
    positional = code.co_argcount + code.co_kwonlyargcount
    arg_names = list(code.co_varnames[:positional])[1:]
    values: dict[str, Any] = {n: local[n] for n in arg_names if n in local}
    if code.co_flags & inspect.CO_VARKEYWORDS:
        extra = code.co_varnames[positional + bool(code.co_flags & inspect.CO_VARARGS)]
        values.update(local.get(extra, {}))
    wanted = list(names)
    if wanted:
        values = {k: v for k, v in values.items() if k in wanted}
    for key in ignore:
        values.pop(key, None)
    return values


def _safe(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_safe(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, (str, int)) and _safe(v) for k, v in value.items())
    return False


def checkpoint_safe(hparams: dict[str, Any], owner: str) -> dict[str, Any]:
    """The hyperparameters that a ``weights_only=True`` checkpoint can hold; warns once about the others."""
    kept = {k: v for k, v in hparams.items() if _safe(v)}
    dropped = sorted(set(hparams) - set(kept))
    if dropped:
        warnings.warn(f"{owner}: hyperparameters {dropped} are not plain numbers, strings, tensors, lists or dicts, "
                      f"so checkpoints do not store them. Pass save_hyperparameters(ignore={dropped}) to silence this.",
                      UserWarning, stacklevel=3)
    return kept


class HyperparametersMixin:
    """``save_hyperparameters()`` and ``hparams`` for TrainModule and DataModule."""

    def save_hyperparameters(self, *names: str, ignore: str | list[str] | tuple[str, ...] = ()) -> None:
        """Record the arguments of ``__init__`` in :attr:`hparams` and in checkpoints.

        Args:
            names: Only these arguments (default: all of them).
            ignore: Arguments to leave out (e.g. a backbone module).
        """
        frame = inspect.currentframe()
        assert frame is not None and frame.f_back is not None
        ignored = [ignore] if isinstance(ignore, str) else list(ignore)
        self.hparams.update(collect_init_args(frame.f_back, self, names, ignored))

    @property
    def hparams(self) -> AttributeDict:
        """The recorded hyperparameters."""
        return vars(self).setdefault("_hparams", AttributeDict())  # type: ignore[no-any-return]
