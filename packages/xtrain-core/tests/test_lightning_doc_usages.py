"""Usages copied from Lightning's own documentation that outside trial R found failing or differing: each case runs
as Lightning runs it (the expected values were taken from Lightning 2.6.6 where they are numbers)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import ConfigError, Trainer, TrainModule
from xtrain.core.testing.models import TinyClassifier, TinyData


def _trainer(tmp_path: Path, **options: Any) -> Trainer:
    settings: dict[str, Any] = {"accelerator": "cpu", "max_epochs": 1, "logger": False, "enable_checkpointing": False,
                                "enable_progress_bar": False, "enable_model_summary": False,
                                "default_root_dir": tmp_path}
    return Trainer(**(settings | options))


class KeepsValidationStatistic(TinyClassifier):
    """Keeps a value computed in validation_step and trains with it (a running statistic)."""

    def __init__(self) -> None:
        super().__init__()
        self.center = torch.zeros(4)
        self.modes: list[tuple[bool, bool]] = []

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.modes.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled()))
        self.center = self(batch[0]).mean(0)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x) + self.center, y)


def test_validation_inside_fit_runs_under_no_grad_so_its_values_can_train(tmp_path: Path) -> None:
    model = KeepsValidationStatistic()
    _trainer(tmp_path, max_epochs=2, limit_train_batches=3, limit_val_batches=2).fit(model, datamodule=TinyData())
    assert model.modes and set(model.modes) == {(False, False)}  # sanity check and both validations
    model.modes.clear()
    _trainer(tmp_path).validate(model, datamodule=TinyData())
    assert set(model.modes) == {(True, False)}  # validate() itself keeps inference mode, as Lightning's


class TopLevelMonitor(TinyClassifier):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0),
                "monitor": "train_loss"}


def test_a_plateau_schedulers_monitor_may_sit_beside_the_optimizer(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_epochs=3, limit_train_batches=2, limit_val_batches=0)
    trainer.fit(TopLevelMonitor(), datamodule=TinyData())
    config = trainer.lr_scheduler_configs[0]
    assert config.monitor == "train_loss" and config.reduce_on_plateau and config.interval == "epoch"


class RecordsStages(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.during: dict[str, dict[str, bool]] = {}

    def _flags(self) -> dict[str, bool]:
        t = self.trainer
        return {"training": t.training, "validating": t.validating, "testing": t.testing,
                "predicting": t.predicting, "evaluating": t.evaluating, "sanity_checking": t.sanity_checking}

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.during["fit"] = self._flags()

    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.during["test"] = self._flags()

    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.during["predict"] = self._flags()


def test_stage_flags_are_true_during_their_stage_and_false_after_it(tmp_path: Path) -> None:
    model, data = RecordsStages(), TinyData()
    trainer = _trainer(tmp_path, limit_train_batches=2, limit_val_batches=1, limit_test_batches=1,
                       limit_predict_batches=1)
    none = {"training": False, "validating": False, "testing": False, "predicting": False, "evaluating": False,
            "sanity_checking": False}
    for run in (trainer.fit, trainer.validate, trainer.test, trainer.predict):
        run(model, datamodule=data)
        assert model._flags() == none, run.__name__
    assert model.during["fit"] == none | {"training": True}
    assert model.during["test"] == none | {"testing": True, "evaluating": True}
    assert model.during["predict"] == none | {"predicting": True}


class LegacySharded(TrainModule):
    def configure_sharded_model(self) -> None:
        if not hasattr(self, "layer"):
            self.layer = torch.nn.Linear(16, 4)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_configure_sharded_model_is_called_with_lightnings_deprecation(tmp_path: Path) -> None:
    model = LegacySharded()
    with pytest.warns(UserWarning, match=r"LegacySharded.configure_sharded_model is deprecated.*configure_model"):
        _trainer(tmp_path, limit_train_batches=2).fit(model, TinyData().train_dataloader())
    assert isinstance(model.layer, torch.nn.Linear) and model.trainer.global_step == 2


def test_configure_sharded_model_may_call_super_and_is_not_called_unless_overridden(tmp_path: Path) -> None:
    class CallsSuper(LegacySharded):
        def configure_sharded_model(self) -> None:
            super().configure_sharded_model()  # LegacySharded's
            TrainModule.configure_sharded_model(self)  # the base, as Lightning's ModelHooks has one

    model = CallsSuper()
    with pytest.warns(UserWarning, match=r"CallsSuper.configure_sharded_model is deprecated"):
        _trainer(tmp_path, limit_train_batches=2).fit(model, TinyData().train_dataloader())
    assert model.trainer.global_step == 2

    class Modern(LegacySharded):  # configure_model only: no deprecation warning, no refusal
        configure_sharded_model = TrainModule.configure_sharded_model

        def configure_model(self) -> None:
            if not hasattr(self, "layer"):
                self.layer = torch.nn.Linear(16, 4)

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*configure_sharded_model")
        _trainer(tmp_path / "m", limit_train_batches=2).fit(Modern(), TinyData().train_dataloader())


def test_configure_sharded_model_beside_configure_model_is_refused(tmp_path: Path) -> None:
    class Both(LegacySharded):
        def configure_model(self) -> None:
            self.configure_sharded_model()

    with pytest.raises(ConfigError, match=r"Both.configure_sharded_model.*move its code into Both.configure_model"):
        _trainer(tmp_path, limit_train_batches=2).fit(Both(), TinyData().train_dataloader())


_X = torch.arange(12.0).unsqueeze(-1)


class SeesBatches(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen: list[list[int]] = []
        self.calls: list[str] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append(batch[0].flatten().int().tolist())
        return self.layer(batch[0]).sum()

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.0)
        steps = self.trainer.estimated_stepping_batches  # Lightning's docs size OneCycleLR so
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.OneCycleLR(opt, 0.1, total_steps=steps)}

    def train_dataloader(self) -> DataLoader[Any]:
        self.calls.append("train")
        return DataLoader(TensorDataset(_X, _X.sum(-1)), batch_size=4, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        self.calls.append("val")
        return DataLoader(TensorDataset(_X, _X.sum(-1)), batch_size=4)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass


# Lightning 2.6.6, seed_everything(1), max_epochs=3, reload_dataloaders_every_n_epochs=1: each reload opens the new
# loader's iterator twice (one base-seed draw more than an epoch without reloading).
_LIGHTNING_RELOADED = [[9, 5, 4, 8], [7, 1, 6, 11], [2, 0, 3, 10], [3, 6, 5, 9], [0, 11, 10, 4], [7, 2, 1, 8],
                       [1, 9, 6, 10], [4, 0, 11, 7], [2, 5, 8, 3]]


def test_reloaded_shuffled_loaders_give_lightnings_order_and_hooks_run_once_per_reload(tmp_path: Path) -> None:
    from xtrain.core import seed_everything

    seed_everything(1)
    model = SeesBatches()
    _trainer(tmp_path, max_epochs=3, reload_dataloaders_every_n_epochs=1, num_sanity_val_steps=0).fit(model)
    assert model.seen == _LIGHTNING_RELOADED
    # estimated_stepping_batches read in configure_optimizers set the loaders up: fit does not ask again
    assert model.calls == ["train", "val"] * 3


class TwoBackwards(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        loss = torch.nn.functional.cross_entropy(self(batch[0]), batch[1])
        self.manual_backward(loss, retain_graph=True)
        self.manual_backward(loss)  # through the retained graph
        opt.step()
        opt.zero_grad()


def test_manual_backward_passes_backwards_arguments_on(tmp_path: Path) -> None:
    model = TwoBackwards()
    _trainer(tmp_path, limit_train_batches=2, limit_val_batches=0).fit(model, datamodule=TinyData())
    assert model.trainer.global_step == 2


def test_save_checkpoint_takes_lightnings_arguments(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, limit_train_batches=1, limit_val_batches=0)
    trainer.fit(TinyClassifier(), datamodule=TinyData())
    trainer.save_checkpoint(filepath=tmp_path / "a.ckpt")
    trainer.save_checkpoint(tmp_path / "b.ckpt", True)  # weights_only, positionally as Lightning allows
    assert (tmp_path / "a.ckpt").is_file() and (tmp_path / "b.ckpt").is_file()
    with pytest.raises(ConfigError, match=r"storage_options=\{'x': 1\}.*CheckpointIO plugin"):
        trainer.save_checkpoint(tmp_path / "c.ckpt", storage_options={"x": 1})


def test_freeze_and_unfreeze_return_the_module() -> None:
    model = TinyClassifier()
    assert model.freeze() is model and not model.training
    assert not any(p.requires_grad for p in model.parameters())
    assert model.unfreeze() is model and model.training and all(p.requires_grad for p in model.parameters())


def test_scaler_and_distributed_sampler_kwargs_as_lightnings(tmp_path: Path) -> None:
    plain = _trainer(tmp_path)
    assert plain.scaler is None and plain.distributed_sampler_kwargs is None
    pytest.importorskip("xtrain.precision")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mixed = _trainer(tmp_path, precision="16-mixed")
    assert isinstance(mixed.scaler, torch.amp.GradScaler)


def test_a_lightning_hparams_yaml_with_tuples_is_read(tmp_path: Path) -> None:
    from xtrain.core._internal.hparams_file import read_hparams_file

    path = tmp_path / "hparams.yaml"
    path.write_text("betas: !!python/tuple\n- 0.9\n- 0.999\ntags: !!python/tuple [a, !!python/tuple [b, c]]\n")
    assert read_hparams_file(path) == {"betas": (0.9, 0.999), "tags": ("a", ("b", "c"))}
    path.write_text("x: !!python/object/apply:os.getcwd []\n")
    from xtrain.core import CheckpointError

    with pytest.raises(CheckpointError, match="tag that would build a Python object"):
        read_hparams_file(path)


class Reloading(SeesBatches):
    """Shuffled, reloaded every epoch, optionally with worker processes; records a random draw per epoch."""

    def __init__(self, num_workers: int = 0) -> None:
        super().__init__()
        self.num_workers = num_workers
        self.draws: list[float] = []

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(TensorDataset(_X), batch_size=4, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self) -> None:
        return None

    def on_train_epoch_end(self) -> None:
        self.draws.append(torch.rand(1).item())


def test_a_resume_with_reloaded_loaders_continues_the_uninterrupted_order(tmp_path: Path) -> None:
    """Outside trial T2: the saved random state was restored after the reload's draw, so the resumed epochs had an
    order of neither run."""
    from xtrain.core import seed_everything
    from xtrain.core.callbacks import ModelCheckpoint

    seed_everything(7)
    whole = Reloading()
    _trainer(tmp_path, max_epochs=4, reload_dataloaders_every_n_epochs=1).fit(whole)
    seed_everything(7)
    first = Reloading()
    saver = ModelCheckpoint(dirpath=tmp_path / "ck", save_top_k=-1, filename="e{epoch}")
    _trainer(tmp_path, max_epochs=2, reload_dataloaders_every_n_epochs=1, enable_checkpointing=True,
             callbacks=[saver]).fit(first)
    seed_everything(7)  # as a new process would
    resumed = Reloading()
    _trainer(tmp_path, max_epochs=4, reload_dataloaders_every_n_epochs=1).fit(
        resumed, ckpt_path=tmp_path / "ck" / "eepoch=1.ckpt")
    assert first.seen == whole.seen[:6] and resumed.seen == whole.seen[6:]
    assert resumed.draws == whole.draws[2:]


def test_reloaded_loaders_with_workers_give_lightnings_order(tmp_path: Path) -> None:
    """Lightning 2.6.6 (seed 7, 12 samples, batch 4, num_workers=2, reloaded every epoch): its reload opens an
    iterator that prefetches, which starts the sampler's epoch (one more draw); epoch 1's order and draw below."""
    from xtrain.core import seed_everything

    seed_everything(7)
    model = Reloading(num_workers=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _trainer(tmp_path, max_epochs=2, reload_dataloaders_every_n_epochs=1).fit(model)
    assert model.seen[3:] == [[1, 0, 5, 2], [10, 11, 4, 3], [7, 9, 6, 8]]
    assert round(model.draws[1], 4) == 0.3593


def test_a_backward_override_is_warned_as_never_called(tmp_path: Path) -> None:
    """Outside trial T2: migrate marks it only on a direct LightningModule subclass; a subclass of a base in another
    file kept its backward silently unused."""
    class Base(TinyClassifier):
        pass

    class CustomBackward(Base):
        def backward(self, loss: torch.Tensor) -> None:
            loss.backward(retain_graph=True)

    with pytest.warns(UserWarning, match=r"CustomBackward defines backward\(\), a Lightning hook that xtrain never "
                                         r"calls.*on_before_backward"):
        _trainer(tmp_path, limit_train_batches=1, limit_val_batches=0).fit(CustomBackward(), datamodule=TinyData())


def test_stage_flags_in_the_sanity_check_and_in_validates_setup(tmp_path: Path) -> None:
    class Flags(RecordsStages):
        def setup(self, stage: str) -> None:
            self.during[f"setup {stage}"] = self._flags()

        def on_validation_start(self) -> None:
            self.during["sanity" if self.trainer.sanity_checking else "validation"] = self._flags()

    model = Flags()
    trainer = _trainer(tmp_path, limit_train_batches=1, limit_val_batches=1, num_sanity_val_steps=1)
    trainer.fit(model, datamodule=TinyData())
    trainer.validate(model, datamodule=TinyData())
    none = dict.fromkeys(("training", "validating", "testing", "predicting", "evaluating", "sanity_checking"), False)
    assert model.during["sanity"] == none | {"sanity_checking": True, "evaluating": True}  # Lightning's ....SE
    assert model.during["validation"] == none | {"validating": True, "evaluating": True}
    assert model.during["setup validate"] == none | {"validating": True, "evaluating": True}


def test_trainer_attributes_lightning_scripts_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trainer = _trainer(tmp_path, barebones=True)
    assert trainer.barebones and trainer.precision_plugin is trainer.strategy.precision
    trainer.print("shown on rank 0")
    assert capsys.readouterr().out == "shown on rank 0\n"
    assert TrainModule.CHECKPOINT_HYPER_PARAMS_KEY == "hyper_parameters"
