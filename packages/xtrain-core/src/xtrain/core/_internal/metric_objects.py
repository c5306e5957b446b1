"""torchmetrics ``Metric`` objects in ``self.log``: computed once per epoch over every rank's data, then reset.

A logged tensor is one number per batch; with ``sync_dist=True`` the epoch value is the batch-size-weighted mean
of all ranks' batch values. A ``Metric`` instead accumulates its own state (counts, sums, or all predictions) as the
user updates it; at the epoch's end ``compute()`` gathers that state from every rank (torchmetrics does it through
``torch.distributed``) and computes the value once, so it equals the metric over the whole data set, for metrics that
are not means of per-batch values (F1, AUROC, ...) too. The step value, when asked for, is the metric's value on the
current batch (what calling the metric returned).

torchmetrics is never imported here: a value can only be a ``Metric`` if torchmetrics is already in ``sys.modules``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core._internal.metrics import MetricStore
    from xtrain.core.strategy import Strategy

__all__ = ["MetricObjects", "is_metric", "load_metric_states", "metric_states"]


def _metric_class() -> Any:
    module = sys.modules.get("torchmetrics")
    return getattr(module, "Metric", None) if module is not None else None


def is_metric(value: object) -> bool:
    """Whether ``value`` is a torchmetrics ``Metric``."""
    cls = _metric_class()
    return cls is not None and isinstance(value, cls)


@dataclass(slots=True)
class _Entry:
    metric: Any
    epoch: bool
    prog_bar: bool
    logger: bool
    key: str


def _scalar(name: str, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise ConfigError("value", shape, f"self.log({name!r}, metric) needs a metric whose compute() returns a "
                          f"scalar.", fix="log a scalar metric (e.g. average='macro'), or compute and log its "
                          "entries yourself.")
    return value.detach().reshape(()).float()


class MetricObjects:
    """The Metric objects logged in the current epoch of each stage."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, _Entry]] = {}
        self._computed: list[Any] = []

    def log(self, store: MetricStore, name: str, metric: Any, *, suffix: str, prog_bar: bool, logger: bool,
            on_step: bool | None, on_epoch: bool | None) -> None:
        """Log ``metric`` under ``name``; ``suffix`` (``"/dataloader_idx_<i>"`` or empty) ends every key, after
        any ``_step``/``_epoch``, as for a logged tensor."""
        if store.in_epoch_end:  # logged in an epoch-end hook: the value is final now
            value = _scalar(name, metric.compute())
            metric.reset()
            store.log(name + suffix, value, prog_bar=prog_bar, logger=logger, on_step=None, on_epoch=None, reduce_fx="mean",
                      sync_dist=False, batch_size=None, add_dataloader_idx=False)
            return
        training = store.stage == "train"
        step = training if on_step is None else on_step
        epoch = (not training) if on_epoch is None else on_epoch
        both = step and epoch
        batch_value = getattr(metric, "_forward_cache", None)
        if step and isinstance(batch_value, torch.Tensor):
            step_key = (f"{name}_step" if both else name) + suffix
            store.log(step_key, batch_value, prog_bar=prog_bar, logger=logger, on_step=True,
                      on_epoch=False, reduce_fx="mean", sync_dist=False, batch_size=None, add_dataloader_idx=False)
            if both and training:  # the plain name shows the latest value until the epoch's, as for a tensor
                store.callback_metrics[name + suffix] = store.callback_metrics[step_key]
        entries = self._entries.setdefault(store.stage, {})
        known = entries.get(name + suffix)
        if known is not None and known.metric is not metric:
            raise ConfigError("value", type(metric).__name__, f"self.log({name!r}, metric) was given two different "
                              f"Metric objects in one epoch.", fix="log each Metric object under its own name.")
        entries[name + suffix] = _Entry(metric, epoch, prog_bar, logger, (f"{name}_epoch" if both else name) + suffix)

    def end_epoch(self, store: MetricStore) -> dict[str, float]:
        """Compute (across ranks) the current stage's metrics; returns the values for the loggers. They are reset by
        :meth:`reset_computed`, after the epoch-end hooks: a hook may still read them (``metric.compute()`` there
        returns the epoch's value, as in Lightning)."""
        for_logger: dict[str, float] = {}
        for name, entry in self._entries.pop(store.stage, {}).items():
            if entry.epoch:
                value = _scalar(name, entry.metric.compute())
                store.callback_metrics[name] = value
                store.callback_metrics[entry.key] = value
                if entry.prog_bar:
                    store.prog_bar_keys.add(entry.key)
                    store.step_values[entry.key] = value
                if entry.logger:
                    for_logger[entry.key] = float(value.item())
            self._computed.append(entry.metric)
        return for_logger

    def reset_computed(self) -> None:
        """Reset the metrics :meth:`end_epoch` computed."""
        for metric in self._computed:
            metric.reset()
        self._computed.clear()

    def begin(self, stage: str) -> None:
        self._entries.pop(stage, None)


def metric_states(module: torch.nn.Module) -> dict[str, dict[str, Any]]:
    """The accumulated state of every ``Metric`` in ``module`` (on CPU), by its name in the module.

    torchmetrics keeps these states out of ``state_dict`` (they are not weights); a checkpoint taken mid-epoch
    needs them so that the resumed epoch's value still covers the whole epoch.
    """
    cls = _metric_class()
    if cls is None:
        return {}
    found: dict[str, dict[str, Any]] = {}
    sub: Any
    for name, sub in module.named_modules():
        if isinstance(sub, cls):
            state = {k: _to(v, torch.device("cpu")) for k, v in sub.metric_state.items()}
            found[name] = {"state": state, "update_count": int(sub._update_count)}
    return found


def _to(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to(device, copy=True)
    if isinstance(value, list):
        return [_to(v, device) for v in value]
    return value


def load_metric_states(module: torch.nn.Module, states: dict[str, dict[str, Any]]) -> None:
    """Put the states :func:`metric_states` saved back into ``module``'s metrics."""
    cls = _metric_class()
    if cls is None or not states:
        return
    sub: Any
    for name, sub in module.named_modules():
        saved = states.get(name)
        if saved is None or not isinstance(sub, cls):
            continue
        for key, value in saved["state"].items():
            setattr(sub, key, _to(value, sub.device))
        sub._update_count = saved["update_count"]
        sub._computed = None


def gather_metric_states(module: torch.nn.Module, strategy: Strategy) -> list[dict[str, Any]] | None:
    """Every rank's metric states (a collective: every rank calls it), or ``None`` when the module has no Metric."""
    if _metric_class() is None:
        return None
    mine = metric_states(module)
    if not mine:
        return None
    return strategy.all_gather_object(mine)
