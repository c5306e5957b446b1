"""``self.log``'s storage: the per-step fast path records exactly what the general path records."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from xtrain.core import ConfigError
from xtrain.core._internal.metrics import MetricStore

DEFAULTS: dict[str, Any] = {"prog_bar": False, "logger": True, "on_step": None, "on_epoch": None,
                            "reduce_fx": "mean", "sync_dist": False, "batch_size": None}


def _visible(store: MetricStore) -> tuple[Any, ...]:
    return ({k: (v.item(), v.dtype, v.shape, v.requires_grad) for k, v in store.step_values.items()},
            {k: v.item() for k, v in store.callback_metrics.items()}, set(store.step_logger_keys),
            set(store.prog_bar_keys), {k: (a.total.item(), a.weight, a.key) for k, a in store.epoch.items()})


def _log(store: MetricStore, name: str, value: Any, **options: Any) -> None:
    store.log(name, value, **{**DEFAULTS, **options})


def test_training_step_scalar_is_detached_and_recorded_like_the_general_path() -> None:
    w = torch.tensor(2.0, requires_grad=True)
    fast, general = MetricStore(), MetricStore()
    _log(fast, "loss", w * 3, prog_bar=True)
    _log(fast, "quiet", w * 4, logger=False)
    # reduce_fx only shapes epoch aggregates: "max" sends the same step value through the general path
    _log(general, "loss", w * 3, prog_bar=True, reduce_fx="max")
    _log(general, "quiet", w * 4, logger=False, on_step=True, on_epoch=False, reduce_fx="max")
    assert _visible(fast) == _visible(general)
    assert fast.step_values["loss"].item() == 6.0 and not fast.step_values["loss"].requires_grad
    assert fast.step_logger_keys == {"loss"} and fast.prog_bar_keys == {"loss"}
    assert fast.step_metrics_for_logger() == {"loss": 6.0}


@pytest.mark.parametrize("value", [torch.tensor([1.5]), torch.tensor(1.5, dtype=torch.float16),
                                   torch.tensor(1.5, dtype=torch.bfloat16), 1.5, torch.tensor(3)])
def test_other_values_become_float_scalars(value: Any) -> None:
    store = MetricStore()
    _log(store, "x", value)
    stored = store.step_values["x"]
    assert stored.shape == () and stored.item() == float(value if not isinstance(value, torch.Tensor)
                                                            else value.float().item())
    assert stored.dtype in (torch.float32, torch.int64)


def test_non_scalar_and_bad_reduction_are_refused_in_training() -> None:
    store = MetricStore()
    with pytest.raises(ConfigError, match="scalar"):
        _log(store, "x", torch.ones(3))
    with pytest.raises(ConfigError, match="reduce_fx"):
        _log(store, "x", torch.tensor(1.0), reduce_fx="median")


def test_evaluation_and_epoch_end_do_not_take_the_step_path() -> None:
    store = MetricStore()
    store.begin("validate")
    _log(store, "val_loss", torch.tensor(2.0), batch_size=4)
    assert "val_loss" not in store.step_values and store.epoch["val_loss"].weight == 4.0
    store.begin("train")
    with store.epoch_end_logging():
        _log(store, "epoch_metric", torch.tensor(5.0))
    assert store.take_pending() == {"epoch_metric": 5.0} and "epoch_metric" not in store.step_logger_keys
    _log(store, "loss", torch.tensor(1.0))
    assert store.step_logger_keys == {"loss"}
    store.begin("validate")
    store.switch("train")
    _log(store, "loss", torch.tensor(7.0))
    assert store.step_values["loss"].item() == 7.0
