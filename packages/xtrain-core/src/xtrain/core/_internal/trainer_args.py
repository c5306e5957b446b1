"""Checking the Trainer's non-hardware arguments, before anything starts."""

from __future__ import annotations

import math
import os
import re
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, NamedTuple

from xtrain.core.callbacks.callback import Callback
from xtrain.core.errors import ConfigError
from xtrain.core.loggers.logger import Logger, PathStr

__all__ = ["Limits", "RunFlags", "barebones_settings", "check_callbacks", "check_loggers", "check_progress_bars",
           "none_as_default",
           "parse_max_time", "parse_run_flags", "parse_settings", "warn_minimum_over_maximum"]


class Limits(NamedTuple):
    """The length and cadence settings after checking (``fast_dev_run`` applied)."""

    max_epochs: int
    max_steps: int
    max_time: timedelta | None
    limit_train_batches: int | float
    limit_val_batches: int | float
    limit_test_batches: int | float
    limit_predict_batches: int | float
    val_check_interval: int | float
    check_val_every_n_epoch: int | None
    num_sanity_val_steps: int
    accumulate_grad_batches: int
    gradient_clip_val: float | None
    gradient_clip_algorithm: Literal["norm", "value"]
    log_every_n_steps: int
    fast_dev_run: int


def _int(name: str, value: object, minimum: int, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(name, value, f"must be an int >= {minimum}.", fix=fix)
    return value


def _limit(name: str, value: object) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(name, value, "must be an int number of batches or a float fraction in [0, 1].",
                          fix=f"write {name}=1.0 for all batches.")
    if isinstance(value, float) and not 0.0 <= value <= 1.0:
        raise ConfigError(name, value, "is a fraction outside [0, 1].",
                          fix=f"write {name}=1.0 for all batches, or an int for a number of batches.")
    if isinstance(value, int) and value < 0:
        skip = "" if name == "limit_train_batches" else f", or {name}=0 to skip them"
        raise ConfigError(name, value, "is a negative number of batches.",
                          fix=f"write {name}=1.0 for all batches, a number of batches like {name}=10{skip}.")
    return value


def parse_max_time(value: object, *, argument: str = "max_time") -> timedelta | None:
    """``"DD:HH:MM:SS"``, a ``timedelta`` or a dict of ``timedelta`` arguments (errors name ``argument``)."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        parsed = value
    elif isinstance(value, str) and re.fullmatch(r"\d+:\d{1,2}:\d{1,2}:\d{1,2}", value.strip()):
        d, h, m, s = (int(x) for x in value.strip().split(":"))
        parsed = timedelta(days=d, hours=h, minutes=m, seconds=s)
    elif isinstance(value, dict):
        try:
            parsed = timedelta(**value)
        except TypeError as err:
            raise ConfigError(argument, value, f"is not a timedelta dict ({err}).",
                              fix=f"write {argument}={{'hours': 1}}.") from None
    else:
        raise ConfigError(argument, value, "must be 'DD:HH:MM:SS', a timedelta or a dict like {'hours': 1}.",
                          fix=f"write {argument}='00:01:00:00' for one hour.")
    if parsed.total_seconds() <= 0:
        raise ConfigError(argument, value, "must be positive.", fix=f"write {argument}='00:01:00:00' for one hour.")
    return parsed


def parse_settings(*, max_epochs: Any, max_steps: Any, max_time: Any, limit_train_batches: Any,
                   limit_val_batches: Any, limit_test_batches: Any, limit_predict_batches: Any,
                   val_check_interval: Any, check_val_every_n_epoch: Any, num_sanity_val_steps: Any,
                   accumulate_grad_batches: Any, gradient_clip_val: Any, gradient_clip_algorithm: Any,
                   log_every_n_steps: Any, fast_dev_run: Any) -> Limits:
    """Check and normalize the length/cadence arguments."""
    if isinstance(fast_dev_run, bool):
        dev = 1 if fast_dev_run else 0
    else:
        dev = _int("fast_dev_run", fast_dev_run, 0, "write fast_dev_run=True for one batch of each stage.")
    steps = _int("max_steps", max_steps, -1, "write max_steps=-1 for no step limit.")
    epochs = 1000 if max_epochs is None and steps == -1 else -1 if max_epochs is None else max_epochs
    epochs = _int("max_epochs", epochs, -1, "write max_epochs=-1 to train until another limit stops it.")
    if isinstance(val_check_interval, bool) or not isinstance(val_check_interval, (int, float)) or (
            isinstance(val_check_interval, float) and not 0.0 < val_check_interval <= 1.0) or (
            isinstance(val_check_interval, int) and val_check_interval < 1):
        raise ConfigError("val_check_interval", val_check_interval, "must be a float in (0, 1] (a fraction of the "
                          "epoch) or an int >= 1 (a number of batches).", fix="write val_check_interval=1.0.")
    if check_val_every_n_epoch is not None:
        _int("check_val_every_n_epoch", check_val_every_n_epoch, 1, "write check_val_every_n_epoch=1.")
    clip = gradient_clip_val
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float)) or not 0 <= clip < math.inf):
        raise ConfigError("gradient_clip_val", clip, "must be a finite non-negative number or None.",
                          fix="write gradient_clip_val=1.0, or None for no clipping.")
    if gradient_clip_algorithm not in ("norm", "value"):
        raise ConfigError("gradient_clip_algorithm", gradient_clip_algorithm, "is not a clipping algorithm.",
                          choices=["norm", "value"], fix="write gradient_clip_algorithm='norm'.")
    limits = {name: _limit(name, value) for name, value in (
        ("limit_train_batches", limit_train_batches), ("limit_val_batches", limit_val_batches),
        ("limit_test_batches", limit_test_batches), ("limit_predict_batches", limit_predict_batches))}
    sanity = _int("num_sanity_val_steps", num_sanity_val_steps, -1, "write num_sanity_val_steps=0 to skip it.")
    if dev:
        limits = dict.fromkeys(limits, dev)
        epochs, steps, sanity, val_check_interval = 1, dev, 0, 1.0
    elif epochs == 0 or steps == 0 or limits["limit_train_batches"] == 0:
        name, value = (("max_epochs", epochs) if epochs == 0 else ("max_steps", steps) if steps == 0
                       else ("limit_train_batches", limits["limit_train_batches"]))
        warnings.warn(f"{name}={value}: fit will not train at all (no step, no checkpoint). That is right only for "
                      f"validate/test/predict; otherwise set {name} to a positive number.", UserWarning, stacklevel=3)
    return Limits(
        max_epochs=epochs, max_steps=steps, max_time=parse_max_time(max_time),
        limit_train_batches=limits["limit_train_batches"], limit_val_batches=limits["limit_val_batches"],
        limit_test_batches=limits["limit_test_batches"], limit_predict_batches=limits["limit_predict_batches"],
        val_check_interval=val_check_interval, check_val_every_n_epoch=check_val_every_n_epoch,
        num_sanity_val_steps=sanity,
        accumulate_grad_batches=_int("accumulate_grad_batches", accumulate_grad_batches, 1,
                                     "write accumulate_grad_batches=1 for no accumulation."),
        gradient_clip_val=float(clip) if clip else None, gradient_clip_algorithm=gradient_clip_algorithm,
        log_every_n_steps=_int("log_every_n_steps", log_every_n_steps, 1, "write log_every_n_steps=50."),
        fast_dev_run=dev,
    )


def warn_minimum_over_maximum(limits: Limits, flags: RunFlags) -> None:
    """``min_epochs``/``min_steps`` above the matching maximum cannot hold: the maximum stops the run first (Lightning
    trains to the maximum without a word), so the user learns it before training rather than from the result."""
    if limits.fast_dev_run:
        return
    for kind, low, high in (("epochs", flags.min_epochs, limits.max_epochs), ("steps", flags.min_steps,
                                                                              limits.max_steps)):
        if 0 <= high < low:
            warnings.warn(f"min_{kind}={low} is more than max_{kind}={high}: training stops at max_{kind}, so "
                          f"min_{kind} never holds. Raise max_{kind} to at least {low}, or lower min_{kind}.",
                          UserWarning, stacklevel=3)


def check_callbacks(callbacks: object) -> list[Callback]:
    items = [] if callbacks is None else callbacks if isinstance(callbacks, (list, tuple)) else [callbacks]
    for cb in items:
        if not isinstance(cb, Callback):
            raise ConfigError("callbacks", cb, "is not a Callback.",
                              fix="pass instances of xtrain.core.callbacks.Callback subclasses.")
    return list(items)


def check_progress_bars(callbacks: list[Callback]) -> None:
    """Refuse two progress bars, as Lightning does: both would draw over each other."""
    from xtrain.core.callbacks import ProgressBar

    bars = [type(cb).__name__ for cb in callbacks if isinstance(cb, ProgressBar)]
    if len(bars) > 1:
        raise ConfigError("callbacks", bars, "holds more than one progress bar; only one can draw.",
                          fix="keep one of them.")


def check_loggers(logger: object, root: str | Path) -> list[Logger]:
    if logger is None or logger is False:
        return []
    if logger is True:
        from xtrain.core.loggers import default_logger

        return [default_logger(Path(root))]
    items = logger if isinstance(logger, (list, tuple)) else [logger]
    for item in items:
        if not isinstance(item, Logger):
            raise ConfigError("logger", item, "is not a Logger.",
                              fix="pass True (the default logger), False, a Logger, or a list of Loggers.")
    return list(items)


def check_root(default_root_dir: object) -> PathStr:
    """``default_root_dir`` as a ``str`` (Lightning's type; ``os.path.join(trainer.default_root_dir, ...)`` and ``+``
    work) that keeps ``Path``'s ``/`` and methods for code written against xtrain 1.x, which returned a ``Path``."""
    if default_root_dir is None:
        return PathStr(os.getcwd())
    if not isinstance(default_root_dir, (str, os.PathLike)):
        raise ConfigError("default_root_dir", default_root_dir, "must be a path.", fix="write default_root_dir='runs'.")
    return PathStr(os.fspath(default_root_dir))


class RunFlags(NamedTuple):
    """The Trainer's behaviour switches after checking (see ``Trainer``'s docstring for each)."""

    overfit_batches: int | float = 0.0
    min_epochs: int = 0
    min_steps: int = 0
    reload_dataloaders_every_n_epochs: int = 0
    sync_batchnorm: bool = False
    detect_anomaly: bool = False
    benchmark: bool | None = None
    barebones: bool = False
    val_check_time: timedelta | None = None


# Lightning's Trainer takes None for these (its saved config.yaml writes them so) and means its default.
_NONE_MEANS: dict[str, Any] = {
    "enable_checkpointing": True, "enable_progress_bar": True, "enable_model_summary": True, "val_check_interval": 1.0,
    "gradient_clip_algorithm": "norm", "limit_train_batches": 1.0, "limit_val_batches": 1.0,
    "limit_test_batches": 1.0, "limit_predict_batches": 1.0, "num_sanity_val_steps": 2, "log_every_n_steps": 50}


def none_as_default(**values: Any) -> dict[str, Any]:
    """``values`` with Lightning's ``None`` replaced by the argument's default (in the order given)."""
    return {name: _NONE_MEANS[name] if value is None else value for name, value in values.items()}


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(name, value, "must be True or False.", choices=[True, False], fix=f"write {name}=True.")
    return value


def check_switches(**switches: object) -> None:
    """Refuse an on/off switch that is not a bool: ``enable_checkpointing="false"`` is truthy and would mean on."""
    for name, value in switches.items():
        _flag(name, value)


def parse_run_flags(*, overfit_batches: Any, min_epochs: Any, min_steps: Any, reload_dataloaders_every_n_epochs: Any,
                    sync_batchnorm: Any, detect_anomaly: Any, benchmark: Any, barebones: Any,
                    val_check_interval: Any) -> RunFlags:
    """Check the behaviour switches; a time ``val_check_interval`` (timedelta, ``"DD:HH:MM:SS"``, dict) lands here."""
    if benchmark is not None:
        _flag("benchmark", benchmark)
    time_interval = val_check_interval if isinstance(val_check_interval, (timedelta, str, dict)) else None
    return RunFlags(
        overfit_batches=_limit("overfit_batches", overfit_batches),
        min_epochs=_int("min_epochs", 0 if min_epochs is None else min_epochs, 0, "write min_epochs=1."),
        min_steps=_int("min_steps", 0 if min_steps is None else min_steps, 0, "write min_steps=100."),
        reload_dataloaders_every_n_epochs=_int("reload_dataloaders_every_n_epochs", reload_dataloaders_every_n_epochs,
                                               0, "write reload_dataloaders_every_n_epochs=0 to never reload."),
        sync_batchnorm=_flag("sync_batchnorm", sync_batchnorm), detect_anomaly=_flag("detect_anomaly", detect_anomaly),
        benchmark=benchmark, barebones=_flag("barebones", barebones),
        val_check_time=None if time_interval is None else _val_check_time(time_interval))


def _val_check_time(value: timedelta | str | dict[str, int]) -> timedelta:
    try:
        parsed = parse_max_time(value)
    except ConfigError:
        raise ConfigError("val_check_interval", value, "is neither a fraction, a number of batches nor a duration.",
                          fix="write val_check_interval='00:00:30:00' to validate every 30 minutes.") from None
    assert parsed is not None
    return parsed


def barebones_settings(*, logger: object, callbacks: list[Callback]) -> dict[str, Any]:
    """The settings ``barebones=True`` implies; a Logger or a ModelCheckpoint passed with it is refused."""
    from xtrain.core.callbacks import ModelCheckpoint, ProgressBar

    if isinstance(logger, Logger) or (isinstance(logger, (list, tuple)) and logger):
        raise ConfigError("logger", type(logger).__name__, "cannot be used with barebones=True (it turns logging "
                          "off).", fix="drop barebones=True, or pass logger=False.")
    clash = [type(cb).__name__ for cb in callbacks if isinstance(cb, (ModelCheckpoint, ProgressBar))]
    if clash:
        raise ConfigError("callbacks", clash, "cannot be used with barebones=True (it turns checkpointing and the "
                          "progress bar off).", fix="drop barebones=True, or drop these callbacks.")
    return {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
            "enable_model_summary": False, "num_sanity_val_steps": 0}
