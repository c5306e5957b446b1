"""torchmetrics Metric objects in self.log / self.log_dict: epoch values, reset, checkpoints (one process)."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from xtrain.core import Callback, Trainer, TrainModule
from xtrain.core.callbacks import ModelCheckpoint
from xtrain.core.errors import ConfigError
from xtrain.core.testing.models import tiny_dataset

torchmetrics = pytest.importorskip("torchmetrics")


class Metered(TrainModule):
    """Logs a training accuracy (step and epoch), a validation F1 and a MetricCollection."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(16, 4)
        self.train_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=4, average="micro")
        self.val_f1 = torchmetrics.classification.MulticlassF1Score(num_classes=4, average="macro")
        self.val_metrics = torchmetrics.MetricCollection({
            "acc": torchmetrics.classification.MulticlassAccuracy(num_classes=4, average="micro"),
            "precision": torchmetrics.classification.MulticlassPrecision(num_classes=4, average="macro"),
        }, prefix="val_")
        self.epoch_end_value: float | None = None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self.net(x)
        self.train_acc(logits.argmax(-1), y)
        self.log("train_acc", self.train_acc, on_step=True, on_epoch=True)
        # As Lightning: the plain name holds this step's value until the epoch's is computed
        self.seen_plain = torch.equal(self.trainer.callback_metrics["train_acc"],
                                      self.trainer.callback_metrics["train_acc_step"])
        return torch.nn.functional.cross_entropy(logits, y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        preds = self.net(x).argmax(-1)
        self.val_f1.update(preds, y)
        self.log("val_f1", self.val_f1)
        self.val_metrics.update(preds, y)
        self.log_dict(self.val_metrics)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(tmp_path: Path, **kwargs: Any) -> Trainer:
    return Trainer(default_root_dir=tmp_path, logger=False, enable_progress_bar=False, enable_model_summary=False,
                   num_sanity_val_steps=0, **kwargs)


def _reference(net: torch.nn.Module, loader: DataLoader[Any]) -> dict[str, float]:
    f1 = torchmetrics.classification.MulticlassF1Score(num_classes=4, average="macro")
    acc = torchmetrics.classification.MulticlassAccuracy(num_classes=4, average="micro")
    with torch.no_grad():
        for x, y in loader:
            preds = net(x).argmax(-1)
            f1.update(preds, y)
            acc.update(preds, y)
    return {"val_f1": float(f1.compute()), "val_acc": float(acc.compute())}


def test_metric_objects_give_whole_epoch_values_and_are_reset(tmp_path: Path) -> None:
    module = Metered()
    val = DataLoader(tiny_dataset(70, seed=1), batch_size=16)  # last batch of 6
    trainer = _trainer(tmp_path, max_epochs=2, enable_checkpointing=False)
    trainer.fit(module, DataLoader(tiny_dataset(64), batch_size=16), val)
    expected = _reference(module.net, val)
    logged = trainer.logged_metrics
    assert logged["val_f1"] == pytest.approx(expected["val_f1"], abs=1e-6)
    assert logged["val_acc"] == pytest.approx(expected["val_acc"], abs=1e-6)
    assert {"val_precision", "train_acc_epoch"} <= set(logged)
    assert "train_acc_step" in trainer.callback_metrics and module.seen_plain
    assert isinstance(trainer.callback_metrics["val_f1"], torch.Tensor)
    for metric in (module.train_acc, module.val_f1, *module.val_metrics.values()):
        assert metric._update_count == 0  # reset at the epoch's end
    # validate() alone computes the same values from the same weights: nothing was left over from fit.
    again = trainer.validate(module, val)[0]
    assert again["val_f1"] == pytest.approx(expected["val_f1"], abs=1e-6)


class Crash(ModelCheckpoint):
    def __init__(self, at: int) -> None:
        super().__init__(every_n_train_steps=3, save_last=True, save_top_k=0)
        self.at = at

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.at:
            raise RuntimeError("simulated crash")


def test_metric_states_are_checkpointed_and_restored_mid_epoch(tmp_path: Path) -> None:
    def train(root: Path, crash_at: int, ckpt: str | None = None) -> Trainer:
        module = Metered()
        trainer = _trainer(root, max_epochs=1, limit_val_batches=0, callbacks=[Crash(crash_at)])
        trainer.fit(module, DataLoader(tiny_dataset(128), batch_size=16, shuffle=True), ckpt_path=ckpt)
        return trainer

    whole = train(tmp_path / "whole", crash_at=-1)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(tmp_path / "crashed", crash_at=5)
    last = tmp_path / "crashed" / "checkpoints" / "last.ckpt"
    saved = torch.load(last, weights_only=True)["metric_states"]
    assert saved[0]["train_acc"]["update_count"] == 3
    resumed = train(tmp_path / "crashed", crash_at=-1, ckpt=str(last))
    assert resumed.logged_metrics["train_acc_epoch"] == whole.logged_metrics["train_acc_epoch"]


class EpochEnd(Metered):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.val_f1.update(self.net(x).argmax(-1), y)

    def on_validation_epoch_end(self) -> None:
        self.log("val_f1", self.val_f1)
        self.epoch_end_value = float(self.trainer.callback_metrics["val_f1"])


def test_metric_logged_in_an_epoch_end_hook_is_computed_then(tmp_path: Path) -> None:
    module = EpochEnd()
    val = DataLoader(tiny_dataset(40, seed=1), batch_size=16)
    results = _trainer(tmp_path).validate(module, val)[0]
    assert results["val_f1"] == pytest.approx(_reference(module.net, val)["val_f1"], abs=1e-6)
    assert module.val_f1._update_count == 0


class Bad(Metered):
    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if isinstance(self.value, torchmetrics.Metric):
            self.value.update(self.net(batch[0]).argmax(-1), batch[1])
        self.log("bad", self.value)


def test_unloggable_values_are_config_errors(tmp_path: Path) -> None:
    val = DataLoader(tiny_dataset(32, seed=1), batch_size=16)
    with pytest.raises(ConfigError, match="torchmetrics Metric"):
        _trainer(tmp_path).validate(Bad("text"), val)
    matrix = torchmetrics.classification.MulticlassConfusionMatrix(num_classes=4)
    with pytest.raises(ConfigError, match="returns a scalar"):
        _trainer(tmp_path).validate(Bad(matrix), val)


def test_importing_xtrain_does_not_import_torchmetrics() -> None:
    code = "import sys, xtrain.core; from xtrain.core import Trainer; print('torchmetrics' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


class ReadsInEpochEnd(TrainModule):
    """lightning-hydra-template's pattern: the epoch-end hook reads the logged metric and tracks its best value."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(16, 4)
        self.val_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=4)
        self.train_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=4)
        self.best = torchmetrics.MaxMetric()
        self.seen: dict[str, list[float]] = {"train": [], "val": []}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self.net(x)
        self.train_acc(logits.argmax(1), y)
        self.log("train_acc", self.train_acc, on_step=False, on_epoch=True)
        return torch.nn.functional.cross_entropy(logits, y)

    def on_train_epoch_end(self) -> None:
        self.seen["train"].append(float(self.train_acc.compute()))

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.val_acc(self.net(x).argmax(1), y)
        self.log("val_acc", self.val_acc)

    def on_validation_epoch_end(self) -> None:
        acc = self.val_acc.compute()
        self.seen["val"].append(float(acc))
        self.best(acc)
        self.log("val_acc_best", self.best.compute())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def test_epoch_end_hooks_read_the_epochs_metric_before_it_is_reset(tmp_path: Path) -> None:
    module = ReadsInEpochEnd()
    logged: list[dict[str, float]] = []
    trainer = Trainer(max_epochs=3, default_root_dir=tmp_path, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                      callbacks=[_Record(logged)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torchmetrics warns when compute() comes before any update (a reset metric)
        trainer.fit(module, DataLoader(tiny_dataset(), batch_size=16), DataLoader(tiny_dataset(), batch_size=16))
    vals = [m["val_acc"] for m in logged]
    assert module.seen["val"] == pytest.approx(vals) and len(vals) == 3
    assert module.seen["train"] == pytest.approx([m["train_acc"] for m in logged])
    assert [m["val_acc_best"] for m in logged] == pytest.approx([max(vals[: i + 1]) for i in range(3)])
    assert not any(module.val_acc.metric_state["tp"].tolist()), "reset once the hooks ran"


class _Record(Callback):
    def __init__(self, into: list[dict[str, float]]) -> None:
        self.into = into

    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule) -> None:
        self.into.append({k: float(v) for k, v in trainer.callback_metrics.items()})


def test_a_metric_logged_on_step_and_on_epoch_in_validation() -> None:
    """As Lightning: the step values go to the loggers (logged_metrics ``val_acc_step``), callback_metrics holds the
    epoch's value under both names. (With evaluation step values kept out of callback_metrics, the plain-name copy of
    the step value raised KeyError here.)"""
    from xtrain.core.testing import TinyClassifier, tiny_loaders

    class Validated(TinyClassifier):
        def __init__(self) -> None:
            super().__init__()
            self.acc = torchmetrics.classification.MulticlassAccuracy(num_classes=4)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.acc(self(x), y)
            self.log("val_acc", self.acc, on_step=True, on_epoch=True)

    trainer = Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=False, num_sanity_val_steps=0, limit_train_batches=2)
    trainer.fit(Validated(), *tiny_loaders())
    assert "val_acc_step" not in trainer.callback_metrics and "val_acc_step" in trainer.logged_metrics
    assert trainer.callback_metrics["val_acc"].item() == trainer.callback_metrics["val_acc_epoch"].item()


def test_metrics_of_several_dataloaders_are_named_and_returned_as_tensors_are() -> None:
    """Keys end in ``/dataloader_idx_<i>`` after ``_step``/``_epoch`` (Lightning's names): with the suffix before
    them, ``validate()`` left the metric out of every dataloader's results."""
    from xtrain.core.testing import TinyClassifier

    class TwoSets(TinyClassifier):
        def __init__(self) -> None:
            super().__init__()
            self.accs = torch.nn.ModuleList(
                torchmetrics.classification.MulticlassAccuracy(num_classes=4, average="micro") for _ in range(2))

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            x, y = batch
            self.accs[dataloader_idx](self(x).argmax(-1), y)
            self.log("acc", self.accs[dataloader_idx], on_step=True, on_epoch=True)

    loaders = [DataLoader(tiny_dataset(24), batch_size=8), DataLoader(tiny_dataset(13, seed=1), batch_size=8)]
    model = TwoSets()
    trainer = Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    results = trainer.validate(model, loaders, verbose=False)
    for index, loader in enumerate(loaders):
        expected = torchmetrics.classification.MulticlassAccuracy(num_classes=4, average="micro")
        with torch.no_grad():
            for x, y in loader:
                expected.update(model(x).argmax(-1), y)
        assert results[index][f"acc_epoch/dataloader_idx_{index}"] == pytest.approx(float(expected.compute()))
        assert f"acc_step/dataloader_idx_{index}" in trainer.logged_metrics
    assert not any(key.endswith(("_epoch", "_step")) for key in trainer.logged_metrics)
