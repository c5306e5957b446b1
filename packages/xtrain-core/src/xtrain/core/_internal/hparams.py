"""``save_hyperparameters()``: record the constructor arguments of a module or data module."""

from __future__ import annotations

import inspect
import warnings
from argparse import Namespace
from collections.abc import Iterable, Mapping
from types import FrameType
from typing import Any

from xtrain.core._internal.bounded import check_bounded
from xtrain.core._internal.loadable import first_unloadable

__all__ = ["AttributeDict", "HyperparametersMixin", "checkpoint_hparams", "checkpoint_safe", "collect_init_args",
           "loggable_hparams"]


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
    """The arguments of the ``__init__`` running in ``frame`` (the caller of ``save_hyperparameters``) and of the
    subclasses' ``__init__`` that called it, as Lightning collects them: a parent that saves records a subclass's own
    arguments too (``Child(num_classes=3)`` calling ``super().__init__(lr=lr)``), the subclass's value winning.

    Each frame's arguments are read from its own code, so a subclass whose ``__init__`` takes other arguments does not
    hide those of the parent ``__init__`` that called ``save_hyperparameters``.
    """
    values: dict[str, Any] = {}
    for init in _init_chain(frame, obj):  # innermost first: a subclass's value replaces its parent's
        values.update(_frame_args(init))
    wanted = list(names)
    if wanted:
        values = {k: v for k, v in values.items() if k in wanted}
    for key in ignore:
        values.pop(key, None)
    return values


def _init_chain(frame: FrameType, obj: object) -> list[FrameType]:
    """``frame`` and the ``__init__`` frames of ``obj`` that called it, innermost first."""
    chain = [frame]
    caller = frame.f_back
    while caller is not None and caller.f_code.co_name == "__init__" and caller.f_code.co_argcount:
        if caller.f_locals.get(caller.f_code.co_varnames[0]) is not obj:
            break
        chain.append(caller)
        caller = caller.f_back
    return chain


def _frame_args(frame: FrameType) -> dict[str, Any]:
    code, local = frame.f_code, frame.f_locals
    positional = code.co_argcount + code.co_kwonlyargcount
    arg_names = list(code.co_varnames[:positional])[1:]
    values: dict[str, Any] = {n: local[n] for n in arg_names if n in local}
    if code.co_flags & inspect.CO_VARKEYWORDS:
        extra = code.co_varnames[positional + bool(code.co_flags & inspect.CO_VARARGS)]
        values.update(local.get(extra, {}))
    return values


def checkpoint_safe(hparams: dict[str, Any], owner: str, *, told: set[tuple[str, ...]] | None = None) -> dict[str, Any]:
    """The hyperparameters that a ``weights_only=True`` checkpoint can hold; warns about the others (once per set of
    names in ``told``: the owner's, so that a run's every save does not repeat it)."""
    kept = {k: v for k, v in hparams.items() if first_unloadable(v, k) is None}
    dropped = sorted(set(hparams) - set(kept))
    if dropped and (told is None or tuple(dropped) not in told):
        if told is not None:
            told.add(tuple(dropped))
        warnings.warn(f"{owner}: hyperparameters {dropped} are not plain values that a weights_only load reads back "
                      f"(numbers, strings, tensors, dtypes, and lists, tuples, sets and dicts of them; a numpy number "
                      f"or a namedtuple is not one), so checkpoints do not store them. Pass "
                      f"save_hyperparameters(ignore={dropped}) to silence this.", UserWarning, stacklevel=3)
    return kept


def _init_arg_named(frame: FrameType, value: object) -> str | None:
    """The name of the ``__init__`` argument in ``frame`` that holds exactly ``value`` (``None`` if none does)."""
    code = frame.f_code
    names = code.co_varnames[1: code.co_argcount + code.co_kwonlyargcount]
    return next((n for n in names if frame.f_locals.get(n) is value), None)


def checkpoint_hparams(owner: object, prefix: str = "") -> dict[str, Any]:
    """The checkpoint entries of ``owner``'s hyperparameters: the values, and how ``__init__`` received them.

    ``hparams_name`` is the ``__init__`` argument that took a whole dict or Namespace (``load_from_checkpoint``
    passes them back through it; ``"kwargs"``, as Lightning's, for arguments recorded one by one); ``hparams_type``
    says which of the two it was; ``hparams_unsaved`` names the ones that are no plain value.
    """
    hparams = getattr(owner, "hparams", {})
    told = vars(owner).setdefault("_unsaved_hparams_told", set())
    kept = checkpoint_safe(dict(hparams), type(owner).__name__, told=told)
    entries: dict[str, Any] = {f"{prefix}hyper_parameters": kept}
    unsaved = sorted(map(str, set(hparams) - set(kept)))
    if unsaved:  # their hparams.yaml entries are text standing for objects: load_from_checkpoint refuses those
        entries[f"{prefix}hparams_unsaved"] = unsaved
    meta = vars(owner).get("_hparams_source", (None, "dict"))
    if meta[0] is not None:
        entries[f"{prefix}hparams_name"] = meta[0]
    entries[f"{prefix}hparams_type"] = meta[1]
    return entries


def loggable_hparams(owner: object | None) -> dict[str, Any]:
    """The hyperparameters to send to the loggers: as ``save_hyperparameters`` recorded them (none after
    ``save_hyperparameters(logger=False)``).

    Raises:
        CheckpointError: They expand to more values, or nest deeper, than a hyperparameters file may hold: the
            loggers copy them out (``hparams.yaml``), which would expand shared entries without end.
    """
    if owner is None or not vars(owner).get("_log_hyperparams", True):
        return {}
    # As Lightning: what save_hyperparameters recorded (hparams_initial), not later edits of self.hparams.
    params = dict(vars(owner).get("_hparams_initial", {}))
    check_bounded(params, where=f"{type(owner).__name__}.hparams (sent to the loggers when a stage starts)")
    return params


def _warn_modules(owner: object, values: Mapping[str, Any]) -> None:
    """As Lightning, at the call: an ``nn.Module`` argument is saved with the weights and is no hyperparameter."""
    from torch import nn

    for name, value in values.items():
        if isinstance(value, nn.Module):
            warnings.warn(f"{type(owner).__name__}.save_hyperparameters(): argument {name!r} is an nn.Module "
                          f"({type(value).__name__}); its weights are saved with the module's, and checkpoints do not "
                          f"store it as a hyperparameter (load_from_checkpoint then needs {name}=...). Write "
                          f"self.save_hyperparameters(ignore=[{name!r}]).", UserWarning, stacklevel=3)


class HyperparametersMixin:
    """``save_hyperparameters()`` and ``hparams`` for TrainModule and DataModule."""

    def save_hyperparameters(self, *args: Any, ignore: str | Iterable[str] | None = None,
                             frame: FrameType | None = None, logger: bool = True) -> None:
        """Record the arguments of ``__init__`` in :attr:`hparams`, in checkpoints and in the loggers.

        Args:
            args: Nothing (every argument), the names of the arguments to keep, or one dict or
                ``argparse.Namespace`` to record as it is (when it is an ``__init__`` argument,
                ``load_from_checkpoint`` passes it back through that argument).
            ignore: Arguments to leave out (e.g. a backbone module).
            frame: The ``__init__`` frame to read the arguments from (default: the caller's).
            logger: Send them to the loggers when fitting starts.
        """
        if frame is None:
            current = inspect.currentframe()
            assert current is not None and current.f_back is not None
            frame = current.f_back
        ignored = [ignore] if isinstance(ignore, str) else list(ignore or ())
        source: tuple[str | None, str] = (None, "dict")
        if len(args) == 1 and not isinstance(args[0], str):
            given = args[0]
            if isinstance(given, Namespace):
                values, kind = dict(vars(given)), "Namespace"
            elif isinstance(given, Mapping):
                values, kind = dict(given), "dict"
            else:
                from xtrain.core.errors import ConfigError

                raise ConfigError("save_hyperparameters", type(given).__name__, "takes argument names, one dict or "
                                  "one argparse.Namespace.", fix="write self.save_hyperparameters() to record every "
                                  "__init__ argument, or pass a dict.")
            source = (_init_arg_named(frame, given), kind)
        else:
            bad = [a for a in args if not isinstance(a, str)]
            if bad:
                from xtrain.core.errors import ConfigError

                raise ConfigError("save_hyperparameters", bad[0], "mixes argument names with other values.",
                                  fix="pass argument names as strings, or one dict.")
            values = collect_init_args(frame, self, args, ignored)
            source = ("kwargs" if values else None, "dict")  # Lightning's hparams_name for arguments one by one
            _warn_modules(self, values)
        vars(self)["_hparams_source"] = source
        vars(self)["_log_hyperparams"] = logger
        self.hparams.update(values)
        for key in ignored:  # from this call's values and from what a parent's call recorded, as Lightning
            self.hparams.pop(key, None)
        vars(self)["_hparams_initial"] = AttributeDict(dict(self.hparams))

    @property
    def hparams(self) -> AttributeDict:
        """The recorded hyperparameters."""
        return vars(self).setdefault("_hparams", AttributeDict())  # type: ignore[no-any-return]

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of the hyperparameters as ``save_hyperparameters`` recorded them (later edits not included)."""
        return AttributeDict(dict(vars(self).get("_hparams_initial", {})))
