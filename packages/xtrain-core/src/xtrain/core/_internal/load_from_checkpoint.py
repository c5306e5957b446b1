"""``load_from_checkpoint``: rebuild a module or data module from the hyperparameters a checkpoint saved.

The file is read with ``weights_only=True`` (nothing in it can run code); the class is then constructed from the
saved hyperparameters, updated with the caller's overrides, and the module's weights are loaded into it. The saved
hyperparameters are bounded by the checkpoint gate that reads the file (:mod:`~xtrain.core._internal.bounded`):
pickle's memo can share one list into a "billion laughs" that loads instantly and expands when the loggers write it.
"""

from __future__ import annotations

import inspect
import warnings
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch

from xtrain.core._internal.hparams_file import read_hparams_file
from xtrain.core._internal.model_setup import mark_configured
from xtrain.core._internal.restore_apply import short_repr as _short_repr
from xtrain.core._internal.restore_plan import RestorePlan, only_lacks_weights
from xtrain.core.defaults.torch_io import read_checkpoint_file
from xtrain.core.errors import CheckpointError

__all__ = ["load_datamodule", "load_module", "read_for_loading"]

_T = TypeVar("_T")
_DAMAGED = "the file is damaged or was not written by xtrain."


def read_for_loading(path: str | Path, map_location: Any) -> dict[str, Any]:
    """Read a single-file checkpoint safely (through the checkpoint gate, which also refuses hyperparameters too
    large or deep once expanded); a sharded directory is refused with the command that consolidates it."""
    file = Path(path)
    if file.is_dir():
        from xtrain.core._internal.lightning_checkpoint import lightning_directory

        foreign = lightning_directory(file)
        if foreign is not None:
            raise CheckpointError(foreign)
        single = file.with_name(f"{file.stem if file.suffix == '.ckpt' else file.name}.full.ckpt")
        raise CheckpointError(f"checkpoint {str(file)!r} is a sharded checkpoint directory; load_from_checkpoint reads "
                              f"one file. Run: xtrain checkpoint consolidate '{file}' '{single}', then load "
                              f"{str(single)!r}")
    if map_location is None and not torch.cuda.is_available():
        map_location = "cpu"
    return read_checkpoint_file(file, map_location=map_location)


def warn_weights_only(weights_only: bool | None, call: str) -> None:
    """Lightning's ``load_from_checkpoint(..., weights_only=False)``: accepted, and said not to loosen anything."""
    if weights_only is False:
        warnings.warn(f"{call}(weights_only=False): xtrain reads every checkpoint with weights_only=True (a file "
                      f"cannot run code when loaded); the argument changes nothing. A checkpoint that holds other "
                      f"objects is refused with what to do.", UserWarning, stacklevel=3)


def _init_kwargs(cls: type, checkpoint: dict[str, Any], prefix: str, overrides: dict[str, Any],
                 from_file: dict[str, Any] | None, path: str | Path) -> dict[str, Any]:
    """The keyword arguments ``cls`` is built with: the saved hyperparameters (or a hparams_file's), updated with the
    caller's ``overrides``; passed whole as one Namespace or dict argument when the file names one (hparams_name).

    The entries come from the file, so each is checked before use and every problem is a :class:`CheckpointError`
    naming ``path`` (``ckpt_path="auto"``, the CLI and the caller all rely on that).
    """
    if from_file is not None:  # as Lightning: a hparams_file's values replace the saved ones
        _refuse_stand_ins(cls, checkpoint.get(f"{prefix}hparams_unsaved"), from_file, overrides, path)
        checkpoint[f"{prefix}hyper_parameters"] = from_file
    saved = checkpoint.get(f"{prefix}hyper_parameters")
    if saved is None or (isinstance(saved, (list, tuple, str, bytes)) and not saved):
        saved = {}
    if not isinstance(saved, dict):
        raise CheckpointError(f"checkpoint {str(path)!r}: its entry {prefix}hyper_parameters is a "
                              f"{type(saved).__name__}, not a dict; {_DAMAGED}")
    odd = [repr(key) for key in saved if not isinstance(key, str)][:5]
    if odd:
        raise CheckpointError(f"checkpoint {str(path)!r}: its entry {prefix}hyper_parameters has keys that are not "
                              f"argument names ({', '.join(odd)}); {_DAMAGED}")
    kwargs: dict[str, Any] = dict(saved)
    kwargs.pop("_instantiator", None)  # LightningCLI's: the function that built class_path entries
    kwargs.update(overrides)
    params = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
    _refuse_class_paths(cls, params, kwargs, overrides, path)
    name = checkpoint.get(f"{prefix}hparams_name")
    if name is not None and not isinstance(name, str):
        raise CheckpointError(f"checkpoint {str(path)!r}: its entry {prefix}hparams_name is a {type(name).__name__}, "
                              f"not the name of an __init__ argument; {_DAMAGED}")
    # Lightning (and xtrain) name "kwargs" when they recorded the arguments one by one: never the **kwargs catch-all
    # itself, nor an argument the hyperparameters hold by name (def __init__(self, kwargs: dict) recorded as such).
    if name and name in params and name not in saved and params[name].kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
        whole: Any = Namespace(**kwargs) if checkpoint.get(f"{prefix}hparams_type") == "Namespace" else kwargs
        return {name: whole}
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params and k != "self"}
    return kwargs


def _refuse_stand_ins(cls: type, unsaved: Any, from_file: dict[str, Any], overrides: dict[str, Any],
                      path: str | Path) -> None:
    """A hparams_file entry that is the text the loggers wrote for an object the checkpoint could not store (a
    dataclass, a module): building ``cls`` with it would pass a ``str`` where the object was."""
    if not isinstance(unsaved, list):
        return
    stale = sorted(k for k in unsaved if isinstance(k, str) and k not in overrides and isinstance(from_file.get(k), str))
    if stale:
        shown = ", ".join(f"{k}: {from_file[k][:80]!r}" for k in stale[:5])
        raise CheckpointError(
            f"hparams_file: {stale} are text the loggers wrote for objects that checkpoint {str(path)!r} could not "
            f"store ({shown}); {cls.__name__} would get that text instead of the object. Pass them: "
            f"{cls.__name__}.load_from_checkpoint(path, hparams_file=..., {', '.join(f'{k}=...' for k in stale[:5])}).")


def _refuse_class_paths(cls: type, params: Mapping[str, inspect.Parameter], kwargs: dict[str, Any],
                        overrides: dict[str, Any], path: str | Path) -> None:
    """An argument LightningCLI saved as ``{"class_path": ..., "init_args": ...}``: Lightning imports and builds the
    class the file names; xtrain builds nothing a file names, so the caller passes the object (the fix shows it)."""
    named = {key: value for key, value in kwargs.items() if key not in overrides and isinstance(value, dict)
             and isinstance(value.get("class_path"), str)}
    if not named:
        return
    calls = []
    for key, value in named.items():
        # An argument annotated as a callable (LightningCLI's OptimizerCallable) takes the class with its arguments.
        callable_ = key in params and "Callable" in str(params[key].annotation)
        calls.append(f"{key}={_construction(value, partial=callable_)[:600]}")
    raise CheckpointError(
        f"checkpoint {str(path)!r}: the hyperparameter(s) {sorted(named)} of {cls.__name__} were saved by LightningCLI "
        f"as a class to build ({{'class_path': ..., 'init_args': ...}}); xtrain never imports or builds what a file "
        f"names. Build it yourself and pass it: {cls.__name__}.load_from_checkpoint(path, {', '.join(calls)}).")


def _construction(value: Any, *, partial: bool = False) -> str:
    """The Python expression that builds what a LightningCLI ``class_path``/``init_args`` entry describes."""
    if not (isinstance(value, dict) and isinstance(value.get("class_path"), str)):
        return repr(value)
    init = value.get("init_args")
    init = init if isinstance(init, dict) else {}
    arguments = ", ".join(f"{k}={_construction(v)}" for k, v in init.items())
    name = value["class_path"][:200]
    if partial:
        return f"functools.partial({name}{', ' if arguments else ''}{arguments})"
    return f"{name}({arguments})"


def _construct(cls: type[_T], kwargs: dict[str, Any], path: str | Path) -> _T:
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise CheckpointError(
            f"{cls.__name__}(**hyperparameters of {str(path)!r}) failed: {err}. The checkpoint holds "
            f"{sorted(map(str, kwargs))}; pass the missing arguments to load_from_checkpoint (e.g. "
            f"{cls.__name__}.load_from_checkpoint(path, backbone=...)), and call self.save_hyperparameters() in "
            f"__init__ so that future checkpoints hold them.") from None
    except Exception as err:
        # The values come from the file: the constructor's own error is chained below for its traceback.
        raise CheckpointError(
            f"{cls.__name__}(**hyperparameters of {str(path)!r}) raised {type(err).__name__}: {err}. The checkpoint "
            f"holds {_short_repr(kwargs)}; pass the corrected value as an argument: "
            f"{cls.__name__}.load_from_checkpoint(path, <name>=<value>).") from err


def load_module(cls: type[_T], path: str | Path, *, map_location: Any, strict: bool | None,
                overrides: dict[str, Any], hparams_file: str | Path | None = None) -> _T:
    """Build ``cls`` from ``path``'s hyperparameters (or ``hparams_file``'s) and load its weights (``strict``: every
    key must match)."""
    from_file = read_hparams_file(hparams_file) if hparams_file is not None else None
    checkpoint = read_for_loading(path, map_location)
    state = checkpoint.get("state_dict")
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {str(path)!r} has no 'state_dict' entry, so it holds no module weights.")
    odd = [repr(key) for key in state if not isinstance(key, str)][:5]
    if odd:
        raise CheckpointError(f"checkpoint {str(path)!r}: its state_dict has keys that are not parameter names "
                              f"({', '.join(odd)}); the file is damaged or was not written by xtrain.")
    module = _construct(cls, _init_kwargs(cls, checkpoint, "", overrides, from_file, path), path)
    assert isinstance(module, torch.nn.Module)
    module.configure_model()  # type: ignore[operator]
    mark_configured(module)
    module.on_load_checkpoint(checkpoint)  # type: ignore[operator]
    asked = "strict=False" if strict is False else "strict_loading=False"
    if strict is None:  # as Lightning: the module's own switch, for checkpoints of only the trainable weights
        strict = bool(getattr(module, "strict_loading", True))
    plan = RestorePlan(str(path), target=cls.__name__)  # as fit's restore: a complex tensor for a float one, too
    plan.module(state, module, strict=strict)
    if plan.problems:
        plan.fixes.append(_fix_for(cls.__name__, state, module, strict=strict))
    plan.check()
    try:
        result = module.load_state_dict(state, strict=strict)
    except RuntimeError as err:
        raise CheckpointError(f"the weights in {str(path)!r} do not fit {cls.__name__}: {err}. Pass strict=False to "
                              f"load the keys that match.") from None
    if strict is False and (result.missing_keys or result.unexpected_keys):
        warnings.warn(f"{cls.__name__}.load_from_checkpoint({str(path)!r}) with {asked}: missing keys "
                      f"{result.missing_keys}, unexpected keys {result.unexpected_keys}.", UserWarning, stacklevel=3)
    device = next((t.device for t in state.values() if isinstance(t, torch.Tensor)), None)
    if device is not None:
        module.to(device)
    return module


def _fix_for(name: str, state: dict[str, Any], module: torch.nn.Module, *, strict: bool) -> str:
    """The fix a refused load names: other hyperparameters where a saved shape differs or the checkpoint has more
    weights than the module; ``strict=False`` where it only lacks some (a fine-tune's frozen layers)."""
    if strict and only_lacks_weights(state, module):
        switch = ("" if getattr(module, "strict_loading", True) is False else
                  f" (or set self.strict_loading = False in {name}.__init__, as in Lightning)")
        return f"the checkpoint lacks some of {name}'s weights: pass strict=False to load those it has{switch}."
    partial = ", or strict=False to load the keys that match" if strict else ""
    return (f"pass the hyperparameters {name} was built with when the checkpoint was saved (as arguments to "
            f"load_from_checkpoint){partial}.")


def load_datamodule(cls: type[_T], path: str | Path, *, map_location: Any, overrides: dict[str, Any],
                    hparams_file: str | Path | None = None) -> _T:
    """Build ``cls`` from ``path``'s data module hyperparameters (or ``hparams_file``'s) and restore its
    ``state_dict``."""
    from_file = read_hparams_file(hparams_file) if hparams_file is not None else None
    checkpoint = read_for_loading(path, map_location)
    datamodule = _construct(cls, _init_kwargs(cls, checkpoint, "datamodule_", overrides, from_file, path), path)
    on_load = getattr(datamodule, "on_load_checkpoint", None)
    if on_load is not None:
        on_load(checkpoint)
    # Lightning keeps a data module's state under its class's name; xtrain under "datamodule".
    state = checkpoint.get("datamodule", checkpoint.get(cls.__qualname__))
    if isinstance(state, dict):
        datamodule.load_state_dict(state)  # type: ignore[attr-defined]
    return datamodule
