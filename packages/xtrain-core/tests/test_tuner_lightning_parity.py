"""The Tuner behaves as Lightning 2.6.6's where an outside trial found it did not (trial D, items 1, 2, 3, 7, 9, 12).

The expected numbers and call forms were measured with Lightning 2.6.6 on the same models (sizes tried, results,
margins, the range test's length); each test fails on the Tuner before these fixes.
"""

from __future__ import annotations

import inspect
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tuner_helpers import Budgeted
from xtrain.core import ConfigError, DataModule, Trainer
from xtrain.core.testing import TinyClassifier, tiny_dataset
from xtrain.core.tuner import LRFinder, Tuner


def _trainer(**kwargs: Any) -> Trainer:
    settings: dict[str, Any] = {"accelerator": "cpu", "max_epochs": 2, "logger": False, "enable_checkpointing": False,
                                "enable_progress_bar": False, "enable_model_summary": False, **kwargs}
    return Trainer(**settings)


def _tried(module: Budgeted) -> list[int]:
    return list(dict.fromkeys(module.sizes))


# -- item 1: the global random generators ------------------------------------------------------------------------


@pytest.mark.parametrize("tune", ["lr_find", "scale_batch_size"])
def test_tuning_leaves_every_global_generator_where_it_was(tune: str) -> None:
    """Trial D c19: after lr_find Lightning's torch.rand(1) is the value it would be without tuning (xtrain drew
    0.9515 instead of 0.0513), and a seeded fit with a shuffled loader after tuning gives Lightning's untuned loss."""
    torch.manual_seed(7)
    random.seed(7)
    np.random.seed(7)
    module = Budgeted(n=64, shuffle=True)
    module.batch_size = 8
    tuner = Tuner(_trainer(max_epochs=3))
    before = torch.get_rng_state(), random.getstate(), np.random.get_state()
    if tune == "lr_find":
        tuner.lr_find(module, num_training=10, update_attr=False)
    else:
        tuner.scale_batch_size(module, max_trials=3)
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]
    numpy_now = np.random.get_state()
    assert all(np.array_equal(a, b) for a, b in zip(numpy_now, before[2], strict=True))

    def seeded_fit(tune_first: bool) -> float:
        torch.manual_seed(1)
        model = Budgeted(n=64, shuffle=True)
        model.batch_size = 8
        trainer = _trainer()
        if tune_first:
            Tuner(trainer).lr_find(model, num_training=10, update_attr=False)
        trainer.fit(model)
        return float(trainer.callback_metrics["train_loss"])

    assert seeded_fit(True) == seeded_fit(False)


def test_the_generators_are_put_back_when_a_trial_fails() -> None:
    class Broken(Budgeted):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            torch.rand(100)
            raise RuntimeError("a bug in training_step")

    module, tuner = Broken(), Tuner(_trainer())
    expected = torch.get_rng_state()
    with pytest.raises(RuntimeError, match="a bug"):
        tuner.scale_batch_size(module)
    assert torch.equal(torch.get_rng_state(), expected)


# -- item 2: binsearch's margin and max_val ------------------------------------------------------------------------


def test_binsearch_takes_lightnings_margin_off_its_result(capsys: pytest.CaptureFixture[str]) -> None:
    """Trial D c5: with a budget of 100 samples Lightning's binsearch finds 100 and returns 95 (5% off), with the same
    sizes tried; margin=0 keeps 100 and margin=0.1 gives 90."""
    module = Budgeted(budget=100)
    assert Tuner(_trainer()).scale_batch_size(module, mode="binsearch") == 95 and module.batch_size == 95
    assert _tried(module) == [2, 4, 8, 16, 32, 64, 128, 96, 112, 104, 100, 102, 101]
    assert "margin of 5.0% off 100: 95" in capsys.readouterr().out
    assert Tuner(_trainer()).scale_batch_size(Budgeted(budget=100), mode="binsearch", margin=0.0) == 100
    assert Tuner(_trainer()).scale_batch_size(Budgeted(budget=100), mode="binsearch", margin=0.1) == 90
    assert Tuner(_trainer()).scale_batch_size(Budgeted(budget=100), mode="power", margin=0.5) == 64  # binsearch only
    with pytest.raises(ConfigError, match="margin"):
        Tuner(_trainer()).scale_batch_size(Budgeted(), mode="binsearch", margin=1.0)


def test_binsearch_counts_only_trials_that_fit_as_lightning() -> None:
    """Trial D c14: Lightning's binsearch with max_trials=4 on 64 samples returns 16 less 10% = 14."""
    module = Budgeted(n=64)
    assert Tuner(_trainer()).scale_batch_size(module, mode="binsearch", max_trials=4, margin=0.1) == 14


@pytest.mark.parametrize(("mode", "max_val", "expected"), [("power", 16, 16), ("binsearch", 64, 60),
                                                           ("binsearch", 100, 95), ("power", 8192, 1024)])
def test_max_val_caps_the_sizes_tried(mode: str, max_val: int, expected: int) -> None:
    """Trial D c14/c21: Lightning's max_val=16 gives 16; with max_val=100 its binsearch caps the doubling at 100 and
    returns 95 after the margin."""
    module = Budgeted()
    found = Tuner(_trainer()).scale_batch_size(module, mode=mode, max_val=max_val)  # type: ignore[arg-type]
    assert found == expected and max(module.sizes) <= max_val


# -- item 3: the range test within the Trainer's limits -------------------------------------------------------------


def test_lr_find_stops_when_the_trainers_epochs_run_out(capsys: pytest.CaptureFixture[str]) -> None:
    """Trial D c13/c3: max_epochs=1 with 8 batches and num_training=20: Lightning's test takes 8 steps, has no
    suggestion and leaves lr at 0.1 (xtrain ran 20 steps and set lr to 0.158)."""
    module = Budgeted(n=64)
    module.batch_size = 8
    with pytest.warns(UserWarning, match="no suggestion") as tuned:
        result = Tuner(_trainer(max_epochs=1)).lr_find(module, num_training=20)
    assert len(result.lrs) == len(result.losses) == 8 and not result.stopped_early
    with pytest.warns(UserWarning, match="no suggestion") as asked:
        assert result.suggestion() is None
    with pytest.warns(UserWarning, match="no suggestion") as plotted:
        result.plot(suggest=True)
    assert {w.filename for w in [*tuned, *asked, *plotted]} == {__file__}  # each names the user's line
    assert module.hparams["lr"] == 0.1
    assert "ended the test after 8 of num_training=20 steps" in capsys.readouterr().out
    limited = Tuner(_trainer(max_epochs=3, limit_train_batches=2)).lr_find(module, num_training=20,
                                                                          update_attr=False)
    assert len(limited.lrs) == 6


# -- item 4: Lightning's call forms ---------------------------------------------------------------------------------


def test_the_signatures_are_lightnings_positional_order() -> None:
    lightning_lr_find = ["model", "train_dataloaders", "val_dataloaders", "dataloaders", "datamodule", "method",
                         "min_lr", "max_lr", "num_training", "mode", "early_stop_threshold", "update_attr", "attr_name"]
    lightning_scale = ["model", "train_dataloaders", "val_dataloaders", "dataloaders", "datamodule", "method", "mode",
                       "steps_per_trial", "init_val", "max_trials", "batch_arg_name", "margin", "max_val"]
    for method, names in ((Tuner.lr_find, lightning_lr_find), (Tuner.scale_batch_size, lightning_scale)):
        parameters = list(inspect.signature(method).parameters.values())[1:]
        assert [p.name for p in parameters] == names
        assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters)
    plot = list(inspect.signature(LRFinder.plot).parameters.values())[1:4]
    assert [(p.name, p.default) for p in plot] == [("suggest", False), ("show", False), ("ax", None)]


class Data(DataModule):
    def __init__(self) -> None:
        super().__init__()
        self.batch_size = 2

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(tiny_dataset(64), batch_size=self.batch_size)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(tiny_dataset(256, seed=1), batch_size=self.batch_size)


def test_lightnings_call_forms_run() -> None:
    """Trial D c14/c21: each of these raised a TypeError."""
    data = Data()
    assert Tuner(_trainer()).scale_batch_size(TinyClassifier(), data, max_trials=3) == 8 and data.batch_size == 8
    data = Data()
    found = Tuner(_trainer()).scale_batch_size(TinyClassifier(), datamodule=data, method="validate", max_trials=3)
    assert found == 8 and data.batch_size == 8
    loaders = DataLoader(tiny_dataset(256), batch_size=8), DataLoader(tiny_dataset(32), batch_size=8)
    result = Tuner(_trainer(max_epochs=1)).lr_find(TinyClassifier(), *loaders, None, None, "fit", 1e-5, 1.0, 20)
    assert len(result.lrs) == 20 and result.suggestion() is not None


def test_lightnings_invalid_call_forms_are_config_errors() -> None:
    tuner = Tuner(_trainer())
    with pytest.raises(ConfigError, match=r"method='bogus'.*choices: 'fit', 'predict', 'test', 'validate'"):
        tuner.scale_batch_size(Budgeted(), method="bogus")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"method='validate'.*choices: 'fit'\."):
        tuner.lr_find(Budgeted(), method="validate")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="dataloaders"):
        tuner.scale_batch_size(Budgeted(), dataloaders=Budgeted().val_dataloader())
    with pytest.raises(ConfigError, match="train_dataloaders"):
        tuner.scale_batch_size(Budgeted(), Budgeted().train_dataloader())


def test_plot_takes_lightnings_arguments(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    result = LRFinder(min_lr=1e-5, max_lr=1.0, num_training=20, mode="exponential")
    result.lrs = [result.lr_at(k) for k in range(20)]
    result.losses = [2.0 - 0.05 * k for k in range(20)]
    figure = result.plot(suggest=True, show=False)
    assert [len(axes.lines) for axes in figure.axes] == [2]
    assert [len(axes.lines) for axes in result.plot().axes] == [1]  # Lightning's default: no suggestion marked
    own = Figure()
    axes = own.add_subplot()
    assert result.plot(True, False, axes, path=tmp_path / "lr.png") is own and len(axes.lines) == 2
    assert (tmp_path / "lr.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ConfigError, match="path="):
        result.plot(str(tmp_path / "x.png"))  # type: ignore[arg-type]


# -- item 5: the first size already runs out of memory -------------------------------------------------------------


@pytest.mark.parametrize(("mode", "init_val", "budget", "expected", "tried"),
                         [("power", 2, 1, 1, [2, 1]), ("power", 16, 2, 2, [16, 8, 4, 2]),
                          ("binsearch", 8, 1, 1, [8, 4, 2])])
def test_a_first_size_out_of_memory_falls_back_as_lightning(mode: str, init_val: int, budget: int, expected: int,
                                                            tried: list[int]) -> None:
    """Trial D c5 power-oom1: Lightning halves (power: 2 fails, 1 fits, 2 fails again, result 1) or bisects towards 1
    (binsearch: 8, 4 and 2 fail and 1 is returned untried) where xtrain raised a ConfigError."""
    module = Budgeted(budget=budget)
    found = Tuner(_trainer()).scale_batch_size(module, mode=mode, init_val=init_val)  # type: ignore[arg-type]
    assert found == expected and module.batch_size == expected and _tried(module) == tried


def test_a_batch_of_one_out_of_memory_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="batch_size=1"):
        Tuner(_trainer()).scale_batch_size(Budgeted(budget=0), init_val=2)


# -- item 6: lr_find with nowhere to write the rate ----------------------------------------------------------------


class NoRate(Budgeted):
    def __init__(self) -> None:
        super().__init__(n=64)
        del self.hparams["lr"]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_lr_find_without_a_rate_attribute_is_refused_before_training() -> None:
    """Trial D c4: Lightning raises (an AttributeError naming attr_name) before the test; xtrain ran it and said
    nothing."""
    module = NoRate()
    with pytest.raises(ConfigError, match=r"attr_name=''.*neither 'lr' nor 'learning_rate'.*Fix: pass attr_name="):
        Tuner(_trainer()).lr_find(module, num_training=10)
    with pytest.raises(ConfigError, match=r"attr_name='rate'.*update_attr=False"):
        Tuner(_trainer()).lr_find(module, num_training=10, attr_name="rate")
    assert module.sizes == []
    result = Tuner(_trainer()).lr_find(module, num_training=10, update_attr=False)
    assert len(result.lrs) == 10


class HparamsData(DataModule):
    """The batch size only in ``hparams`` (``save_hyperparameters()``), as Lightning's templates keep it."""

    def __init__(self, batch_size: int = 2) -> None:
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(tiny_dataset(64), batch_size=self.hparams.batch_size)


def test_scale_batch_size_finds_and_sets_a_batch_size_kept_in_hparams() -> None:
    """An outside trial: 'batch_arg_name is not an attribute' where Lightning found datamodule.hparams.batch_size."""
    data = HparamsData()
    found = Tuner(_trainer()).scale_batch_size(TinyClassifier(), datamodule=data, max_trials=3)
    assert found == 8 and data.hparams.batch_size == 8 and not hasattr(data, "batch_size")
