"""``self.log``'s storage: the per-step fast path records exactly what the general path records."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from typing_extensions import override

from xtrain.core import ConfigError, Trainer, TrainModule
from xtrain.core._internal.metrics import MetricStore

DEFAULTS: dict[str, Any] = {"prog_bar": False, "logger": True, "on_step": None, "on_epoch": None,
                            "reduce_fx": "mean", "sync_dist": False, "batch_size": None}


def _visible(store: MetricStore) -> tuple[Any, ...]:
    callback_metrics = {k: v.item() for k, v in store.callback_metrics.items()}  # first: reading settles the step's
    return ({k: (v.item(), v.dtype, v.shape, v.requires_grad) for k, v in store.step_values.items()},
            callback_metrics, set(store.step_logger_keys),
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


@pytest.mark.parametrize(("spelling", "canonical"), [("avg", "mean"), ("MEAN", "mean"), ("Max", "max"),
                                                     (torch.mean, "mean"), (torch.sum, "sum"), (torch.max, "max"),
                                                     (torch.min, "min")])
def test_lightnings_spellings_of_a_reduction_are_taken(spelling: Any, canonical: str) -> None:
    """Lightning lower-cases ``reduce_fx``, reads ``"avg"`` as mean and takes the torch functions; migrated code
    failed at its first ``self.log``."""
    stores = {}
    for fx in (spelling, canonical):
        store = stores[str(fx)] = MetricStore()
        store.begin("validate")
        for value, size in ((1.0, 2), (4.0, 1), (2.0, 3)):
            _log(store, "v", torch.tensor(value), reduce_fx=fx, batch_size=size)
    spelled, plain = stores[str(spelling)].epoch["v"], stores[canonical].epoch["v"]
    assert (spelled.reduce_fx, spelled.total.item(), spelled.weight) == (canonical, plain.total.item(), plain.weight)
    with pytest.raises(ConfigError, match="torchmetrics Metric"):
        _log(MetricStore(), "x", torch.tensor(1.0), reduce_fx=torch.median)


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
    assert store.callback_metrics["loss"].item() == 7.0 and store.step_values["loss"].item() == 7.0


def test_a_logged_value_does_not_keep_its_graph_alive() -> None:
    store = MetricStore()
    leaf = torch.randn(4, requires_grad=True)
    activation = leaf.exp()
    watch = weakref.ref(activation)
    _log(store, "aux", (activation * activation).sum())  # the graph saves `activation`
    del activation
    gc.collect()
    assert watch() is None, "the stored value still references the step's graph"
    stored = store.callback_metrics["aux"]
    assert stored.grad_fn is None and not stored.requires_grad and store.step_values["aux"] is stored


def test_a_later_value_of_a_checked_name_is_checked_when_read() -> None:
    """The fast path checks a name's first value only; later ones are checked where they are read."""
    store = MetricStore()
    _log(store, "x", torch.tensor(1.0))
    _log(store, "x", torch.tensor(2.5, dtype=torch.float16))  # converted, as the general path does
    value = store.callback_metrics["x"]
    assert value.dtype == torch.float32 and value.item() == 2.5
    _log(store, "x", torch.ones(3))
    with pytest.raises(ConfigError, match=r"self.log\('x'"):
        store.step_metrics_for_logger()


def test_values_of_both_paths_land_in_the_order_they_were_logged() -> None:
    store = MetricStore()
    _log(store, "x", torch.tensor(1.0))  # fast path
    _log(store, "x", torch.tensor(2.0), reduce_fx="max")  # general path, later: it wins
    assert store.callback_metrics["x"].item() == 2.0
    _log(store, "x", torch.tensor(3.0))
    assert store.progress_bar_metrics() == {} and store.step_metrics_for_logger() == {"x": 3.0}


class _ReadsEachStep(TrainModule):
    """A callback-like reader in the step loop sees every step's value, not a stale one."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(2, 1)
        self.seen: list[tuple[float, float]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.net(batch[0]).pow(2).mean()
        self.log("loss", loss)
        return loss

    @override
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.seen.append((self.trainer.callback_metrics["loss"].item(), outputs["loss"].item()))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_callback_metrics_read_in_a_step_hold_that_steps_value() -> None:
    module = _ReadsEachStep()
    trainer = Trainer(max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False)
    trainer.fit(module, DataLoader(TensorDataset(torch.randn(16, 2)), batch_size=4))
    assert len(module.seen) == 4 and len({logged for logged, _ in module.seen}) == 4
    assert all(logged == returned for logged, returned in module.seen)


class _TwoMetrics(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.net(batch[0]).pow(2).mean()
        self.log_dict({"loss": loss, "double": 2 * loss}, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _Prefixed(_TwoMetrics):
    """Overrides log, as some projects do to namespace their metrics: log_dict must go through it."""

    @override
    def log(self, name: str, value: Any, **options: Any) -> None:
        super().log(f"mine/{name}", value, **options)


@pytest.mark.parametrize(("module_class", "prefix"), [(_TwoMetrics, ""), (_Prefixed, "mine/")])
def test_log_dict_records_every_item_with_its_options(module_class: type[TrainModule], prefix: str) -> None:
    trainer = Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False)
    trainer.fit(module_class(), DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4))
    assert set(trainer.progress_bar_metrics) == {f"{prefix}loss", f"{prefix}double"}
    metrics = trainer.callback_metrics
    assert metrics[f"{prefix}double"].item() == pytest.approx(2 * metrics[f"{prefix}loss"].item())
    assert not metrics[f"{prefix}loss"].requires_grad


class _SideValues(TrainModule):
    """Logs a value no backward pass uses (its graph saves a tensor) beside the loss, every step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(2, 1)
        self.watched: list[weakref.ref[torch.Tensor]] = []
        self.bad_step: int | None = None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        out = self.net(batch[0])
        probs = out.sigmoid()
        self.watched.append(weakref.ref(probs))
        self.log("entropy", -(probs * probs.log()).sum(), prog_bar=True)  # saves probs and probs.log()
        self.log("quiet", out.mean(), logger=False)
        if batch_idx == self.bad_step:
            self.log("entropy", out.detach().squeeze(1))  # a later value that is not a scalar
        loss = out.pow(2).mean()
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _side_trainer(steps: int) -> Trainer:
    return Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False)


def test_a_fit_detaches_each_logged_value_and_records_its_options() -> None:
    module = _SideValues()
    trainer = _side_trainer(3)
    trainer.fit(module, DataLoader(TensorDataset(torch.randn(12, 2)), batch_size=4))
    gc.collect()
    assert [ref() for ref in module.watched] == [None, None, None], "a logged value kept its step's graph alive"
    metrics = trainer.callback_metrics
    assert set(metrics) == {"entropy", "quiet", "loss"} and not any(v.requires_grad for v in metrics.values())
    assert set(trainer.progress_bar_metrics) == {"entropy"}
    assert set(trainer.logged_metrics) == {"entropy", "loss"}  # logger=False kept "quiet" out


def test_a_later_non_scalar_value_is_refused_where_it_is_read() -> None:
    module = _SideValues()
    module.bad_step = 1
    trainer = _side_trainer(2)
    with pytest.raises(ConfigError, match=r"self.log\('entropy'"):
        trainer.fit(module, DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4))


def test_an_unsynced_epoch_value_of_a_distributed_run_warns_once(recwarn: pytest.WarningsRecorder) -> None:
    """As Lightning: an epoch value logged without sync_dist is each rank's own (an outside trial saw ranks monitor
    different values and no warning). The stand-in strategy has a world size of 2; no collective is needed."""
    from types import SimpleNamespace

    store = MetricStore()
    store.strategy = SimpleNamespace(world_size=2)  # type: ignore[assignment]
    for _ in range(2):
        store.begin("validate")
        _log(store, "val_loss", torch.tensor(0.5), batch_size=4)
        store.end_epoch()
    told = [w for w in recwarn if "self.log('val_loss', ...) on epoch level in a distributed run" in str(w.message)]
    assert len(told) == 1 and "sync_dist=True" in str(told[0].message)
    single = MetricStore()
    single.begin("validate")
    _log(single, "val_loss", torch.tensor(0.5), batch_size=4)
    single.end_epoch()
    assert len([w for w in recwarn if "distributed run" in str(w.message)]) == 1, "one process: no warning"
