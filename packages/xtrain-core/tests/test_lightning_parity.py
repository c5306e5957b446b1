"""Behaviours that scripts written for Lightning 2.x rely on, under xtrain's names (issue 18)."""

from __future__ import annotations

import time
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import Callback, CheckpointError, ConfigError, DataModule, Trainer, TrainModule
from xtrain.core.testing import TinyClassifier, TinyData, tiny_dataset, tiny_loaders


def quiet(**kwargs: Any) -> Trainer:
    defaults: dict[str, Any] = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False,
                                "enable_checkpointing": False, "limit_train_batches": 4, "limit_val_batches": 2,
                                "num_sanity_val_steps": 0}
    return Trainer(**{**defaults, **kwargs})


# -- (a) load_from_checkpoint -------------------------------------------------------------------------------------
class Wide(TinyClassifier):
    def __init__(self, hidden: int = 32, lr: float = 0.1, backbone: torch.nn.Module | None = None) -> None:
        super().__init__(lr=lr)
        self.save_hyperparameters(ignore=["backbone"])
        self.net = torch.nn.Sequential(torch.nn.Linear(16, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 4))
        self.backbone = backbone


def test_load_from_checkpoint_rebuilds_from_hparams(tmp_path: Path) -> None:
    module = Wide(hidden=12, lr=0.05)
    trainer = quiet(max_steps=3)
    dm = TinyData(batch_size=8)
    trainer.fit(module, datamodule=dm)
    trainer.save_checkpoint(tmp_path / "w.ckpt")
    loaded = Wide.load_from_checkpoint(tmp_path / "w.ckpt", map_location="cpu")
    assert loaded.hparams.hidden == 12 and loaded.hparams.lr == 0.05 and "backbone" not in loaded.hparams
    for a, b in zip(module.state_dict().values(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    overridden = Wide.load_from_checkpoint(str(tmp_path / "w.ckpt"), lr=0.5)
    assert overridden.hparams.lr == 0.5 and overridden.hparams.hidden == 12
    with pytest.raises(CheckpointError, match="strict=False"):
        Wide.load_from_checkpoint(tmp_path / "w.ckpt", hidden=7)
    dm2 = TinyData.load_from_checkpoint(tmp_path / "w.ckpt")
    assert dm2.batch_size == 8
    ckpt = torch.load(tmp_path / "w.ckpt", weights_only=True)
    assert ckpt["global_step"] == 3 and ckpt["epoch"] == 0


def test_load_from_checkpoint_strict_false_warns(tmp_path: Path) -> None:
    class Extra(Wide):
        def __init__(self, hidden: int = 32, lr: float = 0.1) -> None:
            super().__init__(hidden=hidden, lr=lr)
            self.head = torch.nn.Linear(4, 2)

    module = Wide(hidden=8)
    trainer = quiet(max_steps=1)
    trainer.fit(module, tiny_loaders()[0])
    trainer.save_checkpoint(tmp_path / "w.ckpt")
    with pytest.warns(UserWarning, match="missing keys"):
        loaded = Extra.load_from_checkpoint(tmp_path / "w.ckpt", strict=False)
    assert loaded.hparams.hidden == 8


@pytest.mark.parametrize(("edit", "expected"), [
    ({"hyper_parameters": {"hidden": -3}}, r"Strict\(\*\*hyperparameters of .*\) raised RuntimeError: .*negative dimension"),
    ({"hyper_parameters": {"hidden": 8, "lr": "abc"}}, r"raised ValueError: .*holds \{'hidden': 8, 'lr': 'abc'\}; pass the corrected"),
    ({"hparams_name": ["config"]}, r"hparams_name is a list, not the name of an __init__ argument"),
    ({"state_dict": {1: torch.zeros(2)}}, r"state_dict has keys that are not parameter names \(1\)"),
])
def test_load_from_checkpoint_refuses_what_the_file_holds(tmp_path: Path, edit: dict[str, Any],
                                                          expected: str) -> None:
    """Values read from the file that break the constructor or the weights are CheckpointErrors naming the file."""

    class Strict(Wide):
        def __init__(self, hidden: int = 32, lr: float = 0.1) -> None:
            super().__init__(hidden=hidden, lr=float(lr))

    trainer = quiet(max_steps=1)
    trainer.fit(Strict(hidden=8), tiny_loaders()[0])
    trainer.save_checkpoint(tmp_path / "w.ckpt")
    checkpoint = torch.load(tmp_path / "w.ckpt", weights_only=True)
    checkpoint.update(edit)
    torch.save(checkpoint, tmp_path / "edited.ckpt")
    with pytest.raises(CheckpointError, match=expected):
        Strict.load_from_checkpoint(tmp_path / "edited.ckpt")


# -- (b) save_hyperparameters forms ---------------------------------------------------------------------------------
class FromDict(TinyClassifier):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.save_hyperparameters(config)
        self.net = torch.nn.Linear(16, self.hparams.num_classes)


class FromNamespace(TinyClassifier):
    def __init__(self, args: Namespace) -> None:
        super().__init__()
        self.save_hyperparameters(args)
        self.net = torch.nn.Linear(16, args.num_classes)


class Named(TrainModule):
    def __init__(self, a: int, b: int = 2, c: str = "x") -> None:
        super().__init__()
        self.save_hyperparameters("a", "c")


def test_save_hyperparameters_forms(tmp_path: Path) -> None:
    module = FromDict({"num_classes": 4, "lr": 0.2})
    assert module.hparams.num_classes == 4 and module.hparams.lr == 0.2
    assert dict(Named(1).hparams) == {"a": 1, "c": "x"}
    ns = FromNamespace(Namespace(num_classes=4, lr=0.3))
    assert ns.hparams.lr == 0.3
    class Bad(TrainModule):
        def __init__(self) -> None:
            super().__init__()
            self.save_hyperparameters(3)

    with pytest.raises(ConfigError, match="save_hyperparameters"):
        Bad()
    for cls, module_ in ((FromDict, module), (FromNamespace, ns)):
        trainer = quiet(max_steps=1)
        trainer.fit(module_, tiny_loaders()[0])
        trainer.save_checkpoint(tmp_path / f"{cls.__name__}.ckpt")
        loaded = cls.load_from_checkpoint(tmp_path / f"{cls.__name__}.ckpt")
        assert loaded.hparams.num_classes == 4 and loaded.hparams.lr == module_.hparams.lr


# -- (c) step methods without batch_idx -----------------------------------------------------------------------------
class NoIdx(TinyClassifier):
    def training_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
        return super().training_step(batch, 0)

    def validation_step(self, batch: Any) -> None:  # type: ignore[override]
        super().validation_step(batch, 0)

    def test_step(self, batch: Any) -> None:  # type: ignore[override]
        super().test_step(batch, 0)

    def predict_step(self, batch: Any) -> Any:  # type: ignore[override]
        return self(batch[0])


def test_steps_without_batch_idx() -> None:
    train, val = tiny_loaders()
    trainer = quiet(max_steps=4, limit_val_batches=2)
    module = NoIdx()
    trainer.fit(module, train, val)
    assert trainer.global_step == 4
    (metrics,) = trainer.test(module, val, verbose=False)
    assert "test_loss" in metrics
    assert len(trainer.predict(module, val)) == len(val)


def test_several_loaders_pass_dataloader_idx_only_when_taken() -> None:
    seen: list[tuple[int, int]] = []

    class Multi(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            seen.append((batch_idx, dataloader_idx))

    _, val = tiny_loaders()
    quiet().validate(Multi(), [val, val], verbose=False)
    assert {d for _, d in seen} == {0, 1}


# -- (d) fit(model, datamodule) positional -------------------------------------------------------------------------
def test_fit_with_positional_datamodule() -> None:
    trainer = quiet(max_steps=2)
    dm = TinyData()
    trainer.fit(TinyClassifier(), dm)
    assert trainer.datamodule is dm and trainer.global_step == 2
    (metrics,) = trainer.validate(TinyClassifier(), dm, verbose=False)
    assert "val_loss" in metrics
    with pytest.raises(ConfigError, match="together"):
        quiet().fit(TinyClassifier(), dm, datamodule=TinyData())


# -- (e) module services --------------------------------------------------------------------------------------------
def test_module_services() -> None:
    module = TinyClassifier()
    assert module.dtype == torch.float32 and module.loggers == [] and module.logger is None
    assert module.local_rank == 0 and module.current_epoch == 0
    data = {"x": torch.ones(2)}
    assert module.all_gather(data)["x"] is data["x"]
    gathered = module.all_gather({"loss": 0.5, "n": [3, torch.ones(1)]})  # numbers become tensors, as Lightning's
    assert torch.equal(gathered["loss"], torch.tensor(0.5)) and torch.equal(gathered["n"][0], torch.tensor(3))
    module.freeze()
    assert not module.training and not any(p.requires_grad for p in module.parameters())
    module.unfreeze()
    assert module.training and all(p.requires_grad for p in module.parameters())
    first = torch.optim.SGD(module.net[0].parameters(), lr=0.1)
    module.net[3].weight.requires_grad = False
    module.toggle_optimizer(first)
    assert all(p.requires_grad for p in module.net[0].parameters())
    assert not module.net[3].bias.requires_grad
    module.untoggle_optimizer(first)
    assert module.net[3].bias.requires_grad and not module.net[3].weight.requires_grad


def test_module_logger_properties(tmp_path: Path) -> None:
    module = TinyClassifier()
    trainer = quiet(max_steps=1, logger=True, default_root_dir=tmp_path)
    trainer.fit(module, tiny_loaders()[0])
    assert module.logger is trainer.logger and module.loggers == trainer.loggers


# -- (f) manual optimization with two optimizers --------------------------------------------------------------------
class TwoOptimizers(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        first, second = self.optimizers()
        x, y = batch
        for opt in (first, second):
            self.toggle_optimizer(opt)
            loss = torch.nn.functional.cross_entropy(self(x), y)
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
            self.untoggle_optimizer(opt)

    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(self.net[0].parameters(), lr=0.1), torch.optim.SGD(self.net[3].parameters(), lr=0.1)]


def test_manual_global_step_counts_optimizer_steps() -> None:
    trainer = quiet(max_epochs=1, limit_train_batches=6)
    trainer.fit(TwoOptimizers(), tiny_loaders()[0])
    assert trainer.global_step == 12
    trainer = quiet(max_steps=6)
    trainer.fit(TwoOptimizers(), tiny_loaders()[0])
    assert trainer.global_step == 6


def test_datamodule_checkpoint_hooks(tmp_path: Path) -> None:
    class Stateful(TinyData):
        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["dm_extra"] = 7

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            self.extra = checkpoint["dm_extra"]

    trainer = quiet(max_steps=1)
    trainer.fit(TinyClassifier(), datamodule=Stateful())
    trainer.save_checkpoint(tmp_path / "d.ckpt")
    assert Stateful.load_from_checkpoint(tmp_path / "d.ckpt").extra == 7
    dm = Stateful()
    quiet(max_steps=2).fit(TinyClassifier(), datamodule=dm, ckpt_path=tmp_path / "d.ckpt")
    assert dm.extra == 7


def test_predict_dataloader_without_labels() -> None:
    loader = DataLoader(tiny_dataset(16).tensors[0], batch_size=8)

    class Plain(TinyClassifier):
        def predict_step(self, batch: Any) -> Any:  # type: ignore[override]
            return self(batch)

    out = quiet().predict(Plain(), loader)
    assert len(out) == 2 and out[0].shape == (8, 4)
    assert isinstance(DataModule(), DataModule)


# -- (g) override hooks ---------------------------------------------------------------------------------------------
class Hooked(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def configure_model(self) -> None:
        self.calls.append("configure_model")
        if not hasattr(self, "extra"):
            self.extra = torch.nn.Linear(2, 2)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        self.calls.append(f"optimizer_step:{batch_idx}")
        if batch_idx % 2 == 0:
            optimizer.step(closure=optimizer_closure)
        else:
            optimizer_closure()

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        self.calls.append("zero_grad")
        optimizer.zero_grad()

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: Any = None) -> None:
        self.calls.append(f"clip:{gradient_clip_val}")

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        x, y = batch
        return x * 0 + 1, y

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        self.calls.append("transfer")
        return [t.to(device) for t in batch]

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        x, y = batch
        assert bool((x == 1).all())
        return x * 2, y

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        assert bool((batch[0] == 2).all())
        return super().training_step(batch, batch_idx)

    def on_validation_model_eval(self) -> None:
        self.calls.append("model_eval")
        self.eval()

    def on_validation_model_train(self) -> None:
        self.calls.append("model_train")
        self.train()

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(
            optimizer, step_size=1), "interval": "step"}}

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        self.calls.append("lr_scheduler_step")
        scheduler.step()


def test_override_hooks_replace_the_trainers_actions() -> None:
    module = Hooked()
    train, val = tiny_loaders()
    trainer = quiet(max_epochs=1, limit_train_batches=4, limit_val_batches=1, num_sanity_val_steps=0,
                    gradient_clip_val=0.5)
    trainer.fit(module, train, val)
    assert module.calls[0] == "configure_model" and hasattr(module, "extra")
    steps = [c for c in module.calls if c.startswith("optimizer_step")]
    assert steps == [f"optimizer_step:{i}" for i in range(4)]
    # As Lightning: a step the override skips (odd batches) counts, gets no clipping (it runs inside
    # optimizer.step) and the closure zeroes the gradients on every batch (no accumulation).
    assert trainer.global_step == 4
    assert module.calls.count("zero_grad") == 4 and module.calls.count("clip:0.5") == 2
    assert module.calls.count("lr_scheduler_step") == 4
    assert "model_eval" in module.calls and "model_train" in module.calls
    assert module.calls.count("transfer") == 5  # 4 training batches and 1 validation batch


def test_callback_checkpoint_hooks(tmp_path: Path) -> None:
    from xtrain.core import Callback

    class Saver(Callback):
        loaded: Any = None

        def on_save_checkpoint(self, trainer: Trainer, module: TrainModule, checkpoint: dict[str, Any]) -> None:
            checkpoint["saver"] = {"n": 3}

        def on_load_checkpoint(self, trainer: Trainer, module: TrainModule, checkpoint: dict[str, Any]) -> None:
            self.loaded = checkpoint["saver"]

    trainer = quiet(max_steps=1, callbacks=[Saver()])
    trainer.fit(TinyClassifier(), tiny_loaders()[0])
    trainer.save_checkpoint(tmp_path / "c.ckpt")
    saver = Saver()
    quiet(max_steps=2, callbacks=[saver]).fit(TinyClassifier(), tiny_loaders()[0], ckpt_path=tmp_path / "c.ckpt")
    assert saver.loaded == {"n": 3}


def test_on_load_checkpoint_reaches_the_module_before_the_callbacks(tmp_path: Path) -> None:
    """As in Lightning: a module that rewrites the checkpoint (renamed keys) does so before any callback reads it."""
    from xtrain.core import ModelCheckpoint

    calls: list[str] = []

    class Renaming(TinyClassifier):
        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["state_dict"] = {f"old.{k}": v for k, v in checkpoint["state_dict"].items()}

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            calls.append("module")
            checkpoint["state_dict"] = {k.removeprefix("old."): v for k, v in checkpoint["state_dict"].items()}

    class Reader(Callback):
        def on_load_checkpoint(self, trainer: Trainer, module: TrainModule, checkpoint: dict[str, Any]) -> None:
            calls.append("callback:" + ",".join(sorted({k.split(".")[0] for k in checkpoint["state_dict"]})))

    class LastReader(ModelCheckpoint):
        def on_load_checkpoint(self, trainer: Trainer, module: TrainModule, checkpoint: dict[str, Any]) -> None:
            calls.append("checkpoint-callback")
            super().on_load_checkpoint(trainer, module, checkpoint)

    trainer = quiet(max_steps=1)
    trainer.fit(Renaming(), tiny_loaders()[0])
    trainer.save_checkpoint(tmp_path / "r.ckpt")
    quiet(max_steps=2, enable_checkpointing=True, default_root_dir=tmp_path,
          callbacks=[LastReader(), Reader()]).fit(Renaming(), tiny_loaders()[0], ckpt_path=tmp_path / "r.ckpt")
    assert calls == ["module", "callback:net", "checkpoint-callback"], calls  # checkpoint callbacks last, as there


def test_fit_with_nothing_to_train_skips_the_training_hooks(tmp_path: Path) -> None:
    """As Lightning's fit loop: with limit_train_batches=0, or resumed from a run that already reached max_epochs,
    fit calls no on_train_start/on_train_end and runs no (empty) epochs; the sanity check still runs."""
    calls: list[str] = []
    hooks = ("on_train_start", "on_train_epoch_start", "on_train_epoch_end", "on_train_end", "on_sanity_check_start")

    class Recorder(Callback):
        pass

    for hook in hooks:
        setattr(Recorder, hook, lambda self, *args, _hook=hook: calls.append(_hook))
    train, val = tiny_loaders()
    with pytest.warns(UserWarning, match="limit_train_batches=0"):
        trainer = quiet(max_epochs=2, limit_train_batches=0, num_sanity_val_steps=1, callbacks=[Recorder()])
    module = TinyClassifier()
    trainer.fit(module, train, val)
    assert calls == ["on_sanity_check_start"] and trainer.current_epoch == 0 and trainer.global_step == 0

    done = quiet(max_epochs=1)
    done.fit(module, train)
    done.save_checkpoint(tmp_path / "done.ckpt")
    calls.clear()
    before = [p.detach().clone() for p in module.parameters()]
    again = quiet(max_epochs=1, callbacks=[Recorder()])
    again.fit(module, train, ckpt_path=tmp_path / "done.ckpt")
    assert calls == [] and again.current_epoch == 1 and again.global_step == 4
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))


def test_a_failing_teardown_hook_fails_fit_after_every_teardown_ran() -> None:
    """As Lightning: a callback whose teardown raises fails the call (it was silently swallowed), and the module's
    and the other callbacks' teardown still run; after a failed run the run's own error is the one raised."""
    ran: list[str] = []

    class Broken(Callback):
        def teardown(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
            ran.append("broken")
            raise OSError("cannot remove the scratch directory")

    class Tidy(Callback):
        def teardown(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
            ran.append("tidy")

    class Module(TinyClassifier):
        def teardown(self, stage: str) -> None:
            ran.append("module")

    with pytest.raises(OSError, match="scratch directory"):
        quiet(max_steps=1, callbacks=[Broken(), Tidy()]).fit(Module(), tiny_loaders()[0])
    assert ran == ["broken", "tidy", "module"]

    class Failing(Module):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            raise ValueError("the run's own error")

    ran.clear()
    with pytest.warns(UserWarning, match="teardown hook raised OSError"), pytest.raises(ValueError, match="own error"):
        quiet(max_steps=1, callbacks=[Broken(), Tidy()]).fit(Failing(), tiny_loaders()[0])
    assert ran == ["broken", "tidy", "module"]


# -- (h) verbose results table, ckpt_path="best" from a new Trainer ------------------------------------------------
def test_validate_verbose_prints_table(capsys: pytest.CaptureFixture[str]) -> None:
    _, val = tiny_loaders()
    quiet().validate(TinyClassifier(), val)
    out = capsys.readouterr().out
    assert "Validate metric" in out and "DataLoader 0" in out and "val_loss" in out
    quiet().test(TinyClassifier(), val, verbose=False)
    assert "test_loss" not in capsys.readouterr().out


def test_best_checkpoint_found_by_a_new_trainer(tmp_path: Path) -> None:
    from xtrain.core import ModelCheckpoint

    def make() -> Trainer:
        return quiet(max_epochs=3, default_root_dir=tmp_path, callbacks=[
            ModelCheckpoint(tmp_path / "ckpts", monitor="val_loss", save_last=True)])

    train, val = tiny_loaders()
    first = make()
    first.fit(TinyClassifier(), train, val)
    best = first.checkpoint_callback.best_model_path  # type: ignore[union-attr]
    fresh = make()
    (metrics,) = fresh.test(TinyClassifier(), val, ckpt_path="best", verbose=False)
    assert "test_loss" in metrics
    from xtrain.core._internal.checkpointing import find_checkpoint

    assert find_checkpoint(fresh, "best") == best


def test_bare_test_after_predict_still_uses_the_best_checkpoint_of_fit(tmp_path: Path) -> None:
    """Lightning's rule: test()/validate()/predict() without a model use fit's best checkpoint, whatever ran in
    between (xtrain did so only right after fit: a predict(model) in between made test() use the weights in memory)."""
    from xtrain.core import ModelCheckpoint

    train, val = tiny_loaders()
    module = TinyClassifier()
    trainer = quiet(max_epochs=3, default_root_dir=tmp_path, callbacks=[
        ModelCheckpoint(tmp_path / "ckpts", monitor="val_loss", save_top_k=1)])
    trainer.fit(module, train, val)
    best = trainer.checkpoint_callback.best_model_path  # type: ignore[union-attr]
    trainer.predict(module, val)
    assert trainer.ckpt_path is None  # a model was passed: its weights, no checkpoint
    trainer.test(dataloaders=val, verbose=False)
    assert str(trainer.ckpt_path) == best
    trainer.validate(dataloaders=val, verbose=False)
    assert str(trainer.ckpt_path) == best


def test_last_means_a_last_file_not_the_newest_top_k_file(tmp_path: Path) -> None:
    """As Lightning: ckpt_path="last" is a last*.ckpt (or OnExceptionCheckpoint's file); without one it warns and
    loads nothing. xtrain used to fall back to the newest top-k file: other weights than the user's "last"."""
    import shutil

    from xtrain.core import ModelCheckpoint
    from xtrain.core.callbacks import OnExceptionCheckpoint

    train, val = tiny_loaders()
    module = TinyClassifier()
    trainer = quiet(max_epochs=2, default_root_dir=tmp_path, callbacks=[
        ModelCheckpoint(tmp_path / "ckpts", monitor="val_loss", save_top_k=1)])
    trainer.fit(module, train, val)
    assert [p.name for p in (tmp_path / "ckpts").iterdir()] and not list((tmp_path / "ckpts").glob("last*"))
    with pytest.warns(UserWarning, match="ckpt_path='last': there is no last checkpoint"):
        trainer.test(module, val, ckpt_path="last", verbose=False)
    assert trainer.ckpt_path is None
    on_exception = OnExceptionCheckpoint(tmp_path / "exc")
    trainer = quiet(max_epochs=1, default_root_dir=tmp_path, callbacks=[
        ModelCheckpoint(tmp_path / "ckpts", monitor="val_loss", save_top_k=1), on_exception])
    on_exception.dirpath.mkdir()
    top_k = next((tmp_path / "ckpts").iterdir())
    shutil.copy(top_k, on_exception.ckpt_path)  # as if a crash had saved it
    trainer.test(module, val, ckpt_path="last", verbose=False)
    assert str(trainer.ckpt_path) == str(on_exception.ckpt_path) != str(top_k)


def test_validation_step_values_get_their_own_logger_rows(tmp_path: Path) -> None:
    """As Lightning: a value logged on_step in validation_step goes to the loggers after its batch, on a count of
    validation batches (0, 1, 2, ... across the fit; the sanity check counts none); it is in logged_metrics, not in
    callback_metrics, and never lands on training rows (xtrain copied the last one onto the next epoch's rows)."""
    import csv

    from xtrain.core import CSVLogger

    class StepLogged(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("vs", float(10 * self.current_epoch + batch_idx), on_step=True, on_epoch=False)
            self.log("vb", float(batch_idx), on_step=True, on_epoch=True)

    train, val = tiny_loaders(n=64, batch_size=8)  # 8 training and 2 validation batches an epoch
    trainer = quiet(max_epochs=2, log_every_n_steps=4, logger=CSVLogger(tmp_path), num_sanity_val_steps=1)
    trainer.fit(StepLogged(), train, val)
    rows = list(csv.DictReader(next(tmp_path.rglob("metrics.csv")).read_text().splitlines()))
    vs = [(int(r["step"]), float(r["vs"])) for r in rows if r.get("vs")]
    assert vs == [(0, 0.0), (1, 1.0), (2, 10.0), (3, 11.0)]
    assert not [r for r in rows if r.get("train_loss") and (r.get("vs") or r.get("vb_step"))]
    assert [float(r["vb_step"]) for r in rows if r.get("vb_step")] == [0.0, 1.0, 0.0, 1.0]
    assert "vs" not in trainer.callback_metrics and "vb_step" not in trainer.callback_metrics
    assert trainer.callback_metrics["vb"].item() == 0.5 == trainer.callback_metrics["vb_epoch"].item()
    assert trainer.logged_metrics["vs"] == 11.0 and trainer.logged_metrics["vb_step"] == 1.0


@pytest.mark.parametrize("manual", [False, True])
def test_values_logged_in_on_train_batch_end_reach_their_own_row(tmp_path: Path, manual: bool) -> None:
    """Lightning writes a step's row after the batch's ``on_train_batch_end`` hooks; xtrain wrote it before them, so
    each such value landed on the next row and the last batch's never reached the loggers."""
    import csv

    from xtrain.core import CSVLogger

    class BatchEnd(Callback):
        def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any,
                               batch_idx: int) -> None:
            module.log("cb", float(batch_idx))

    class Logged(TinyClassifier):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = not manual

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if not manual:
                return super().training_step(batch, batch_idx)
            opt = self.optimizers()
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self(x), y)
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
            return None

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.log("m", float(100 + batch_idx))

    train, _ = tiny_loaders(n=32, batch_size=8)  # 4 batches an epoch
    trainer = quiet(max_epochs=2, log_every_n_steps=1, logger=CSVLogger(tmp_path), callbacks=[BatchEnd()])
    trainer.fit(Logged(), train)
    rows = list(csv.DictReader(next(tmp_path.rglob("metrics.csv")).read_text().splitlines()))
    cb = [(int(r["step"]), int(r["epoch"]), float(r["cb"])) for r in rows if r.get("cb")]
    m = [(int(r["step"]), float(r["m"])) for r in rows if r.get("m")]
    assert cb == [(s, s // 4, float(s % 4)) for s in range(8)]  # Lightning's steps: those before the batch's
    assert m == [(s, 100.0 + s % 4) for s in range(8)]


def test_an_epochs_values_and_its_end_hooks_values_are_one_logger_row(tmp_path: Path) -> None:
    """Lightning writes an epoch's aggregates and what its epoch-end hooks log in one ``log_metrics`` call; xtrain
    wrote two rows at the same step (an extra ``epoch`` point in TensorBoard and MLflow for every epoch)."""
    import csv

    from xtrain.core import CSVLogger

    class EpochValues(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = super().training_step(batch, batch_idx)
            self.log("ta", 1.0, on_step=False, on_epoch=True)
            return loss

        def on_train_epoch_end(self) -> None:
            self.log("tb", 2.0)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("va", 3.0)

        def on_validation_epoch_end(self) -> None:
            self.log("vb", 4.0)

    train, val = tiny_loaders(n=32, batch_size=8)
    trainer = quiet(max_epochs=2, log_every_n_steps=50, logger=CSVLogger(tmp_path))
    trainer.fit(EpochValues(), train, val)
    rows = list(csv.DictReader(next(tmp_path.rglob("metrics.csv")).read_text().splitlines()))
    assert [(r["ta"], r["tb"]) for r in rows if r.get("ta") or r.get("tb")] == [("1.0", "2.0")] * 2
    assert [(r["va"], r["vb"]) for r in rows if r.get("va") or r.get("vb")] == [("3.0", "4.0")] * 2


@pytest.mark.parametrize("options", [{"on_step": True}, {"on_epoch": False}])
def test_a_step_value_logged_in_an_epoch_end_hook_is_refused(options: dict[str, bool]) -> None:
    """Lightning raises for ``self.log(..., on_step=True)`` in ``on_train_epoch_end``; xtrain took it silently."""

    class EpochEnd(TinyClassifier):
        def on_train_epoch_end(self) -> None:
            self.log("late", 1.0, **options)

    with pytest.raises(ConfigError, match="epoch-end hook") as caught:
        quiet(max_epochs=1).fit(EpochEnd(), tiny_loaders(n=16, batch_size=8)[0])
    assert caught.value.argument == next(iter(options))

    class Plain(TinyClassifier):
        def on_train_epoch_end(self) -> None:
            self.log("fine", 2.0, on_epoch=True, on_step=False)

    trainer = quiet(max_epochs=1)
    trainer.fit(Plain(), tiny_loaders(n=16, batch_size=8)[0])
    assert trainer.callback_metrics["fine"].item() == 2.0


def test_manual_optimization_global_step_moves_with_each_optimizer_step() -> None:
    """Lightning 2.6.6 reads (1, 2), (3, 4), ... after each of two optimizers' steps; xtrain read (0, 0), (2, 2)."""
    seen: list[tuple[int, int]] = []

    class TwoOptimizers(TinyClassifier):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:
            first, second = self.optimizers()  # type: ignore[misc]
            x, y = batch
            for opt in (first, second):
                loss = torch.nn.functional.cross_entropy(self(x), y)
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()
                seen.append(self.global_step)

        def configure_optimizers(self) -> Any:
            return [torch.optim.SGD(self.parameters(), lr=0.01), torch.optim.SGD(self.parameters(), lr=0.01)]

    trainer = quiet(max_steps=5, limit_train_batches=10)
    trainer.fit(TwoOptimizers(), tiny_loaders()[0])
    assert list(zip(seen[::2], seen[1::2], strict=True)) == [(1, 2), (3, 4), (5, 6)]
    assert trainer.global_step == 6  # max_steps checked after the batch, as Lightning (6 steps over 3 batches)


# -- (i) ModelCheckpoint and EarlyStopping parameters ----------------------------------------------------------------
def test_model_checkpoint_parameters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from xtrain.core import ModelCheckpoint

    def run() -> ModelCheckpoint:
        ckpt = ModelCheckpoint(tmp_path, filename="{epoch}-{val_loss:.2f}", monitor="val_loss", save_top_k=-1,
                               verbose=True, auto_insert_metric_name=False, save_last=True)
        train, val = tiny_loaders()
        quiet(max_epochs=2, callbacks=[ckpt], enable_checkpointing=True).fit(TinyClassifier(), train, val)
        return ckpt

    run()
    names = sorted(p.name for p in tmp_path.glob("*.ckpt"))
    assert len(names) == 3 and "last.ckpt" in names and all("=" not in n for n in names)
    assert "saved" in capsys.readouterr().out
    torch.manual_seed(0)
    second = run()
    names2 = sorted(p.name for p in tmp_path.glob("*.ckpt"))
    assert "last-v1.ckpt" in names2 and second.last_model_path.endswith("last-v1.ckpt")
    assert len(names2) >= 5  # the first run's files were not overwritten


def test_model_checkpoint_saves_after_mid_epoch_validation(tmp_path: Path) -> None:
    from xtrain.core import ModelCheckpoint

    ckpt = ModelCheckpoint(tmp_path, monitor="val_loss", save_top_k=-1, save_on_train_epoch_end=False)
    train, val = tiny_loaders()
    quiet(max_epochs=1, val_check_interval=0.5, num_sanity_val_steps=0, callbacks=[ckpt]).fit(
        TinyClassifier(), train, val)
    assert len(list(tmp_path.glob("*.ckpt"))) == 2  # after each validation; the epoch end did not save again


def test_early_stopping_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    from xtrain.core import EarlyStopping

    stop = EarlyStopping("missing", strict=False, verbose=True)
    train, val = tiny_loaders()
    with pytest.warns(UserWarning, match="not stopping"):
        quiet(max_epochs=2, callbacks=[stop]).fit(TinyClassifier(), train, val)
    stop = EarlyStopping("val_loss", verbose=True, stopping_threshold=10.0)
    trainer = quiet(max_epochs=5, callbacks=[stop])
    trainer.fit(TinyClassifier(), train, val)
    assert trainer.current_epoch == 1 and "stopping threshold" in capsys.readouterr().out
    assert isinstance(stop.best_score, torch.Tensor)  # as Lightning's: scripts call .item() on it
    assert stop.best_score.item() == float("inf")  # the threshold stopped it before a best was kept, as Lightning
    assert stop.state_dict()["best_score"] == stop.best_score.item()  # a plain float in the checkpoint


# -- (j) Trainer flags ----------------------------------------------------------------------------------------------
def test_overfit_batches_uses_the_same_batches() -> None:
    seen: list[torch.Tensor] = []

    class Watch(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            seen.append(batch[1].clone())
            return super().training_step(batch, batch_idx)

    train, val = tiny_loaders()
    trainer = Trainer(overfit_batches=2, max_epochs=2, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)
    with pytest.warns(UserWarning, match="overfit_batches: the training dataloader shuffles; xtrain reads it in "
                                         "order"):  # as Lightning's "turning off shuffling" warning
        trainer.fit(Watch(), train, val)
    assert len(seen) == 4 and torch.equal(seen[0], seen[2]) and torch.equal(seen[1], seen[3])
    assert trainer._val_limits == [2]


def test_min_epochs_and_min_steps_hold_off_early_stopping() -> None:
    from xtrain.core import EarlyStopping

    train, val = tiny_loaders()
    trainer = quiet(max_epochs=6, min_epochs=4, callbacks=[EarlyStopping("val_loss", stopping_threshold=100.0)])
    trainer.fit(TinyClassifier(), train, val)
    assert trainer.current_epoch == 4
    trainer = quiet(max_epochs=6, min_steps=10, callbacks=[EarlyStopping("val_loss", stopping_threshold=100.0)])
    trainer.fit(TinyClassifier(), train, val)
    assert trainer.global_step == 10  # stopped as soon as min_steps was reached, mid-epoch


def test_reload_dataloaders_every_n_epochs() -> None:
    calls: list[int] = []

    class Counting(TinyData):
        def train_dataloader(self) -> DataLoader[Any]:
            calls.append(1)
            return super().train_dataloader()

    quiet(max_epochs=4, reload_dataloaders_every_n_epochs=2).fit(TinyClassifier(), datamodule=Counting())
    assert len(calls) == 2  # at the start and before epoch 2


def test_barebones_benchmark_anomaly_and_time_interval(tmp_path: Path) -> None:
    from xtrain.core import ModelCheckpoint

    trainer = Trainer(barebones=True, max_steps=2, default_root_dir=tmp_path, benchmark=False, detect_anomaly=True)
    assert not trainer.loggers and not trainer.checkpoint_callbacks and trainer.num_sanity_val_steps == 0
    trainer.fit(TinyClassifier(), tiny_loaders()[0])
    assert not list(tmp_path.rglob("*")) and torch.backends.cudnn.benchmark is False
    with pytest.raises(ConfigError, match="barebones"):
        Trainer(barebones=True, callbacks=[ModelCheckpoint()])
    with pytest.raises(ConfigError, match="val_check_interval"):
        Trainer(val_check_interval="soon")
    validations: list[int] = []

    class Count(TinyClassifier):
        def on_validation_start(self) -> None:
            validations.append(self.global_step)

    quiet(max_epochs=1, limit_train_batches=3, val_check_interval="00:01:00:00").fit(Count(), *tiny_loaders())
    assert validations == []  # three batches never take an hour
    quiet(max_epochs=1, limit_train_batches=3, val_check_interval={"microseconds": 1}).fit(Count(), *tiny_loaders())
    assert validations == [1, 2, 3]


def test_sync_batchnorm_converts_under_several_processes_only() -> None:
    from xtrain.core._internal.run_flags import sync_batchnorm
    from xtrain.core._internal.trainer_args import RunFlags

    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    sync_batchnorm(RunFlags(sync_batchnorm=True), net, world_size=1)
    assert isinstance(net[1], torch.nn.BatchNorm1d) and not isinstance(net[1], torch.nn.SyncBatchNorm)
    sync_batchnorm(RunFlags(sync_batchnorm=True), net, world_size=2)
    assert isinstance(net[1], torch.nn.SyncBatchNorm)


# -- (k) utilities --------------------------------------------------------------------------------------------------
def test_rank_zero_utilities(capsys: pytest.CaptureFixture[str]) -> None:
    from xtrain.core.rank_zero import rank_zero_info, rank_zero_only, rank_zero_warn

    @rank_zero_only
    def hello() -> str:
        return "hi"

    assert rank_zero_only.rank == 0 and hello() == "hi"
    rank_zero_info("info line")
    with pytest.warns(UserWarning, match="careful"):
        rank_zero_warn("careful")
    rank_zero_only.rank = 1
    try:
        assert hello() is None
        rank_zero_info("hidden")
    finally:
        rank_zero_only.rank = 0
    out = capsys.readouterr().out
    assert "info line" in out and "hidden" not in out


def test_seed_everything_defaults(restore_environment: None) -> None:
    from xtrain.core import seed_everything

    assert seed_everything(7, workers=True) == 7
    assert seed_everything() == 7  # from XTRAIN_SEED
    a = torch.rand(1)
    seed_everything(7)
    assert torch.equal(a, torch.rand(1))


def test_xtrain_cli_from_a_script(tmp_path: Path) -> None:
    from xtrain.core.cli import XtrainCLI

    cli = XtrainCLI(TinyClassifier, TinyData, run=False, args=[
        "--model.lr", "0.05", "--data.batch_size", "8", "--trainer.max_steps", "2", "--trainer.logger", "false",
        "--trainer.enable_progress_bar", "false", f"--trainer.default_root_dir={tmp_path}"])
    assert cli.model.hparams.lr == 0.05 and cli.datamodule.batch_size == 8 and cli.subcommand is None
    cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.trainer.global_step == 2
    cli = XtrainCLI(TinyClassifier, TinyData, trainer_defaults={"max_steps": 3, "logger": False,
                                                                "enable_progress_bar": False,
                                                                "default_root_dir": str(tmp_path / "second")},
                    args=["fit", "--model.lr", "0.2"])
    assert cli.subcommand == "fit" and cli.trainer.global_step == 3 and cli.model.hparams.lr == 0.2


def test_xtrain_cli_in_a_script_refuses_abbreviations_and_typos_with_the_closest_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As the xtrain command (issue 17): --trainer.max_epoch is not taken as --trainer.max_epochs (argparse's
    abbreviations, which LightningCLI also accepts), and a YAML key with a typo names the closest valid key."""
    from xtrain.core.cli import XtrainCLI

    with pytest.raises(SystemExit) as info:
        XtrainCLI(TinyClassifier, TinyData, args=["fit", "--trainer.max_epoch", "3"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "did you mean --trainer.max_epochs" in err
    config = tmp_path / "cfg.yaml"
    config.write_text("trainer:\n  max_epoch: 3\nmodel:\n  lrr: 0.1\n")
    with pytest.raises(SystemExit):
        XtrainCLI(TinyClassifier, TinyData, args=["fit", "--config", str(config)])
    err = capsys.readouterr().err
    assert "did you mean 'trainer.max_epochs'" in err or "did you mean 'model.lr'" in err
    with pytest.raises(SystemExit):
        XtrainCLI(TinyClassifier, TinyData, run=False, args=["--model.lrr", "0.1"])
    assert "did you mean --model.lr" in capsys.readouterr().err


def test_xtrain_cli_resume_writes_its_config_into_the_resumed_run(tmp_path: Path) -> None:
    """fit --ckpt_path continues the checkpoint's run directory; its config.yaml went to a new, otherwise empty
    version directory (log_dir was read at setup, before the resume moved the loggers)."""
    import yaml

    from xtrain.core.cli import XtrainCLI

    common = ["--trainer.enable_progress_bar", "false", f"--trainer.default_root_dir={tmp_path}",
              "--trainer.logger", "xtrain.core.CSVLogger", f"--trainer.logger.save_dir={tmp_path}"]
    XtrainCLI(TinyClassifier, TinyData, args=["fit", "--trainer.max_epochs", "1", *common])
    run = tmp_path / "xtrain_logs" / "version_0"
    last = next(run.rglob("last.ckpt"))
    XtrainCLI(TinyClassifier, TinyData, args=["fit", "--trainer.max_epochs", "2", "--ckpt_path", str(last), *common])
    assert sorted(p.name for p in (tmp_path / "xtrain_logs").iterdir()) == ["version_0"]
    assert yaml.safe_load((run / "config.yaml").read_text())["trainer"]["max_epochs"] == 2


def test_epoch_is_logged_and_failed_runs_leave_no_version_dir(tmp_path: Path) -> None:
    import csv

    from xtrain.core import CSVLogger

    logger = CSVLogger(tmp_path)
    quiet(max_epochs=2, logger=logger, log_every_n_steps=2).fit(TinyClassifier(), *tiny_loaders())
    rows = list(csv.DictReader(logger.metrics_file.open()))
    assert {r["epoch"] for r in rows} == {"0", "1"}

    class Broken(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            raise RuntimeError("broken before the first step")

    failing = CSVLogger(tmp_path)
    with pytest.raises(RuntimeError, match="broken"):
        quiet(max_epochs=1, logger=failing, num_sanity_val_steps=1).fit(Broken(), *tiny_loaders())
    assert sorted(p.name for p in (tmp_path / "xtrain_logs").iterdir()) == ["version_0"]


def test_save_hyperparameters_logger_false_keeps_them_from_the_loggers(tmp_path: Path) -> None:
    from xtrain.core import CSVLogger

    class Private(TinyClassifier):
        def __init__(self, secret: int = 3) -> None:
            super().__init__()
            self.save_hyperparameters(logger=False)

    logger = CSVLogger(tmp_path)
    module = Private()
    quiet(max_steps=1, logger=logger).fit(module, tiny_loaders()[0])
    assert module.hparams.secret == 3 and not (logger.log_dir / "hparams.json").exists()
    assert not (logger.log_dir / "hparams.yaml").exists()


class _ValSteps(Callback):
    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_validation_end(self, trainer: Trainer, module: TrainModule) -> None:
        self.steps.append(trainer.global_step)


def test_a_stop_requested_mid_epoch_validates_and_saves_that_epoch_first(tmp_path: Path) -> None:
    """As Lightning: should_stop set at a batch's end mid-epoch runs that epoch's validation, then the epoch's
    checkpoint is saved (ranked by it); training used to end without either."""
    from xtrain.core import ModelCheckpoint

    class StopAt(Callback):
        def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any,
                               batch_idx: int) -> None:
            if trainer.global_step == 6:
                trainer.should_stop = True

    val = _ValSteps()
    ck = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=-1, filename="{epoch}-{step}")
    trainer = quiet(max_epochs=3, enable_checkpointing=True, callbacks=[StopAt(), val, ck])
    trainer.fit(TinyClassifier(), *tiny_loaders())
    assert trainer.global_step == 6 and val.steps == [4, 6]  # 4 batches an epoch: validation at 4, then at the stop
    assert sorted(p.name for p in tmp_path.glob("*.ckpt")) == ["epoch=0-step=4.ckpt", "epoch=1-step=6.ckpt"]


def test_max_time_validates_and_saves_where_it_stops(tmp_path: Path) -> None:
    from datetime import timedelta

    from xtrain.core import ModelCheckpoint

    class Slow(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            time.sleep(0.05)
            return super().training_step(batch, batch_idx)

    val = _ValSteps()
    ck = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", filename="{step}")
    trainer = quiet(max_epochs=1, limit_train_batches=100, max_time=timedelta(seconds=0.5), enable_checkpointing=True,
                    callbacks=[val, ck])
    trainer.fit(Slow(), *tiny_loaders(n=2000))
    assert 0 < trainer.global_step < 100 and trainer.should_stop
    assert val.steps == [trainer.global_step]
    assert ck.best_model_path.endswith(f"step={trainer.global_step}.ckpt")


def test_on_train_batch_start_returning_minus_one_ends_the_epoch() -> None:
    """As Lightning: the module's hook returning -1 skips the rest of the epoch (no step, no validation there); a
    callback's return value is not read."""
    seen: list[tuple[int, int]] = []

    class Skipping(TinyClassifier):
        def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
            return -1 if (self.current_epoch, batch_idx) == (0, 2) else None

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            seen.append((self.current_epoch, batch_idx))
            return super().training_step(batch, batch_idx)

    class Ignored(Callback):
        def on_train_batch_start(self, trainer: Trainer, module: TrainModule, batch: Any, batch_idx: int) -> int:
            return -1

    val = _ValSteps()
    trainer = quiet(max_epochs=2, limit_train_batches=5, callbacks=[Ignored(), val])
    trainer.fit(Skipping(), *tiny_loaders())
    assert seen == [(0, 0), (0, 1), *((1, i) for i in range(5))]
    assert trainer.global_step == 7 and trainer.current_epoch == 2 and val.steps == [7]


def test_on_train_batch_end_receives_detached_outputs_as_lightning() -> None:
    received: list[Any] = []

    class Outputs(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = super().training_step(batch, batch_idx)
            return [loss, {"loss": loss, "extra": loss * 2}, None][batch_idx]

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            received.append(outputs)

    trainer = quiet(max_epochs=1, limit_train_batches=3)
    with pytest.warns(UserWarning, match="training_step returned None, so this batch updates nothing; the step "
                                         "still counts"):
        trainer.fit(Outputs(), tiny_loaders()[0])
    assert list(received[0]) == ["loss"] and list(received[1]) == ["loss", "extra"] and received[2] == {}
    assert not any(t.requires_grad for t in [received[0]["loss"], *received[1].values()])
    assert trainer.global_step == 3, "a step returning None counts, as in Lightning"


def test_a_step_returning_none_updates_nothing() -> None:
    class NoneAtOne(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = super().training_step(batch, batch_idx)
            if batch_idx == 1:
                self.before = [p.detach().clone() for p in self.parameters()]
                return None
            if batch_idx == 2:
                assert all(torch.equal(a, b) for a, b in zip(self.before, self.parameters(), strict=True))
            return loss

    with pytest.warns(UserWarning, match="training_step returned None"):
        quiet(max_epochs=1, limit_train_batches=3).fit(NoneAtOne(), tiny_loaders()[0])


def test_configure_optimizers_may_return_a_list_of_dicts() -> None:
    class Plateau(TinyClassifier):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return [{"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(
                opt, patience=0, factor=0.5), "monitor": "val_loss"}}]

    trainer = quiet(max_epochs=3)
    trainer.fit(Plateau(), *tiny_loaders())
    assert len(trainer.optimizers) == 1 and len(trainer.lr_scheduler_configs) == 1
    assert trainer.lr_scheduler_configs[0].monitor == "val_loss"


def test_swa_epoch_start_counts_from_one_as_lightning() -> None:
    """swa_epoch_start=2 starts SWA at the second epoch (current_epoch 1): the learning rates at each epoch's start
    are Lightning 2.6's, measured side by side (they started one epoch late)."""
    from xtrain.core.callbacks import StochasticWeightAveraging

    rates: list[float] = []

    class Rates(Callback):
        def on_train_epoch_start(self, trainer: Trainer, module: TrainModule) -> None:
            rates.append(trainer.optimizers[0].param_groups[0]["lr"])

    swa = StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=2)
    quiet(max_epochs=5, callbacks=[swa, Rates()]).fit(TinyClassifier(lr=0.1), *tiny_loaders())
    assert rates == pytest.approx([0.1, 0.1, 0.098776, 0.095225, 0.089695], abs=1e-6)
    assert swa.num_averaged == 4


def test_is_last_batch_and_num_sanity_val_batches() -> None:
    flags: list[tuple[int, bool]] = []
    sanity: list[list[float]] = []

    class Watch(Callback):
        def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any,
                               batch_idx: int) -> None:
            flags.append((batch_idx, trainer.is_last_batch))

        def on_sanity_check_start(self, trainer: Trainer, module: TrainModule) -> None:
            sanity.append(trainer.num_sanity_val_batches)

    _, val = tiny_loaders()
    _, short = tiny_loaders(n=4)  # one validation batch
    quiet(max_epochs=1, limit_train_batches=3, num_sanity_val_steps=2, callbacks=[Watch()]).fit(
        TinyClassifier(), tiny_loaders()[0], [val, short])
    assert flags == [(0, False), (1, False), (2, True)] and sanity == [[2, 1]]


def test_a_resumed_datamodule_builds_its_loaders_from_its_restored_state(tmp_path: Path) -> None:
    """As Lightning: the checkpoint's DataModule state is loaded before the dataloaders are asked for, so a
    curriculum that picks its data by its state resumes with the right data (xtrain asked first)."""

    class Curriculum(TinyData):
        def __init__(self) -> None:
            super().__init__(batch_size=16, n=64)
            self.level = 0
            self.asked: list[int] = []

        def train_dataloader(self) -> DataLoader[Any]:
            self.asked.append(self.level)
            return super().train_dataloader()

        def state_dict(self) -> dict[str, Any]:
            return {"level": self.level}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.level = state["level"]

    first = Curriculum()
    first.level = 3
    trainer = quiet(max_epochs=1, enable_checkpointing=True, default_root_dir=tmp_path)
    trainer.fit(TinyClassifier(), datamodule=first)
    resumed = Curriculum()
    quiet(max_epochs=2, default_root_dir=tmp_path / "b").fit(
        TinyClassifier(), datamodule=resumed, ckpt_path=trainer.checkpoint_callback.last_model_path)  # type: ignore[union-attr]
    assert resumed.asked == [3]


def test_val_check_batch() -> None:
    train, val = tiny_loaders()
    trainer = quiet(max_epochs=1, limit_train_batches=10, val_check_interval=0.5)
    trainer.fit(TinyClassifier(), train, val)
    assert trainer.val_check_batch == 5
    trainer = quiet(max_steps=1, val_check_interval=3, check_val_every_n_epoch=None)
    trainer.fit(TinyClassifier(), train, val)
    assert trainer.val_check_batch == 3
    trainer = quiet(max_steps=1)  # limit_train_batches=4: an epoch of 4 batches
    trainer.fit(TinyClassifier(), train, val)
    assert trainer.val_check_batch == 4


def test_validation_turned_off_counts_no_validation_batches() -> None:
    """As Lightning: limit_val_batches=0 turns validation off, so there are no validation loaders to count ([], it
    was [0]); limit_test_batches=0 likewise for test."""
    seen: list[tuple[list[float], list[float]]] = []

    class Watch(Callback):
        def on_train_epoch_start(self, trainer: Trainer, module: TrainModule) -> None:
            seen.append((trainer.num_val_batches, trainer.num_sanity_val_batches))

    train, val = tiny_loaders()
    trainer = quiet(max_epochs=1, limit_train_batches=2, limit_val_batches=0, callbacks=[Watch()])
    trainer.fit(TinyClassifier(), train, val)
    assert seen == [([], [])] and trainer.num_val_batches == []
    trainer = quiet(max_epochs=1, limit_train_batches=2, limit_val_batches=3, limit_test_batches=0)
    module = TinyClassifier()
    trainer.fit(module, train, val)
    assert trainer.num_val_batches == [3]
    trainer.test(module, val)
    assert trainer.num_test_batches == []


def test_an_evaluation_limited_to_nothing_runs_no_hook_and_returns_nothing() -> None:
    """As Lightning: validate/test with every loader limited to 0 batches return [] (they returned one empty dict per
    loader), predict returns None, and none of the stage's hooks runs."""
    called: list[str] = []

    class Watch(Callback):
        def on_test_start(self, trainer: Trainer, module: TrainModule) -> None:
            called.append("on_test_start")

        def on_validation_epoch_end(self, trainer: Trainer, module: TrainModule) -> None:
            called.append("on_validation_epoch_end")

        def on_predict_start(self, trainer: Trainer, module: TrainModule) -> None:
            called.append("on_predict_start")

    _, val = tiny_loaders()
    trainer = quiet(limit_test_batches=0, limit_val_batches=0, limit_predict_batches=0, callbacks=[Watch()])
    assert trainer.test(TinyClassifier(), [val, val]) == []
    assert trainer.validate(TinyClassifier(), val) == []
    assert trainer.predict(TinyClassifier(), val) is None
    assert called == []
    assert len(quiet(limit_test_batches=1).test(TinyClassifier(), [val, val])) == 2  # a limit of 1 still runs


def test_several_validation_loaders_log_and_return_one_value_each(tmp_path: Path) -> None:
    """As Lightning: keys logged in the steps of one of several dataloaders end in "/dataloader_idx_<i>" (they were
    averaged over all of them into one value), validate returns a dict per dataloader, add_dataloader_idx=False
    keeps one key; values logged at the epoch's end go to every dict."""
    from xtrain.core import CSVLogger

    class Two(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self(x), y)
            self.log("val_loss", loss)
            self.log("idx", float(dataloader_idx))
            self.log("together", 1.0, add_dataloader_idx=False)

        def on_validation_epoch_end(self) -> None:
            self.log("shared", 2.0)

    _, first = tiny_loaders(n=64, batch_size=16, seed=1)
    _, second = tiny_loaders(n=32, batch_size=16, seed=2)
    module = Two()
    trainer = quiet(max_epochs=1, logger=CSVLogger(tmp_path))
    trainer.fit(module, tiny_loaders()[0], [first, second])
    keys = {"val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1", "idx/dataloader_idx_0", "idx/dataloader_idx_1"}
    assert keys <= set(trainer.callback_metrics) and "val_loss" not in trainer.callback_metrics
    assert trainer.callback_metrics["idx/dataloader_idx_1"].item() == 1.0
    results = trainer.validate(module, [first, second], verbose=False)
    assert [sorted(r) for r in results] == [["idx/dataloader_idx_0", "shared", "together", "val_loss/dataloader_idx_0"],
                                            ["idx/dataloader_idx_1", "shared", "together", "val_loss/dataloader_idx_1"]]
    alone = [trainer.validate(module, loader, verbose=False)[0]["val_loss"] for loader in (first, second)]
    assert [results[0]["val_loss/dataloader_idx_0"], results[1]["val_loss/dataloader_idx_1"]] == pytest.approx(alone)


def test_estimated_stepping_batches_inside_configure_optimizers() -> None:
    seen: list[int | float] = []

    class OneCycle(TinyClassifier):
        def configure_optimizers(self) -> Any:
            seen.append(self.trainer.estimated_stepping_batches)
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=int(seen[-1]))
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    dm = TinyData()
    trainer = quiet(max_epochs=3, accumulate_grad_batches=2)
    trainer.fit(OneCycle(), dm)
    assert seen == [6] and trainer.global_step == 6 and dm.trainer is trainer
    assert quiet(max_steps=5, max_epochs=-1).estimated_stepping_batches == 5
    with pytest.raises(ConfigError, match=r"estimated_stepping_batches=None: is read before fit\(\).*Fix: read "
                                          r"trainer.estimated_stepping_batches inside configure_optimizers"):
        _ = quiet(max_epochs=3).estimated_stepping_batches  # it said the dataloader had no length


def test_test_without_a_model_after_fit_uses_the_best_checkpoint(tmp_path: Path) -> None:
    from xtrain.core import ModelCheckpoint

    class Worse(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("score", float(self.current_epoch))  # epoch 0 is the best (mode="min")

    module = Worse()
    train, val = tiny_loaders()
    trainer = quiet(max_epochs=3, callbacks=[ModelCheckpoint(tmp_path, monitor="score")])
    trainer.fit(module, train, val)
    best = torch.load(trainer.checkpoint_callback.best_model_path, weights_only=True)  # type: ignore[union-attr]
    assert best["epoch"] == 0
    assert not torch.equal(module.net[0].weight, best["state_dict"]["net.0.weight"])
    trainer.test(dataloaders=val, verbose=False)
    assert torch.equal(module.net[0].weight, best["state_dict"]["net.0.weight"])


def test_engine_collectives_take_numbers_and_collections() -> None:
    from xtrain.core import Engine

    engine = Engine(accelerator="cpu", devices=1)
    engine.launch()
    total = 0.0
    for value in (1.5, 2.5):  # a script's running loss as a Python float, gathered then summed
        total += value
    gathered = engine.all_gather({"loss": total, "parts": (torch.ones(2), 4)})
    assert gathered["loss"].sum().item() == 4.0 and gathered["parts"][0].shape == (1, 2)
    assert gathered["parts"][1].tolist() == [4]
    reduced = engine.all_reduce([1.0, torch.tensor(3.0)], reduce_op="sum")
    assert [r.item() for r in reduced] == [1.0, 3.0]


def test_xtrain_cli_callback_objects_in_trainer_defaults_and_saved_config(tmp_path: Path) -> None:
    import yaml

    from xtrain.core import Callback
    from xtrain.core.cli import SaveConfigCallback, XtrainCLI

    class CountBatches(Callback):
        def __init__(self) -> None:
            self.batches = 0

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.batches += 1

    counter = CountBatches()
    defaults = {"callbacks": counter, "max_steps": 3, "enable_progress_bar": False, "default_root_dir": str(tmp_path)}
    cli = XtrainCLI(TinyClassifier, TinyData, run=False, trainer_defaults=defaults, args=["--model.lr", "0.3"])
    cli.trainer.fit(cli.model, cli.datamodule)
    assert counter.batches == 3
    saved = yaml.safe_load((Path(cli.trainer.log_dir) / "config.yaml").read_text())
    assert saved["model"]["lr"] == 0.3 and saved["trainer"]["max_steps"] == 3

    sent: list[str] = []

    class AlsoElsewhere(SaveConfigCallback):
        def save_config(self, trainer: Any, module: Any, stage: str) -> None:
            sent.append(stage)

    logger_args = ["--trainer.logger", "false"]  # log_dir is default_root_dir: the second run finds the first's file
    for overwrite in (True, False):
        cli = XtrainCLI(TinyClassifier, TinyData, run=False, trainer_defaults=defaults, args=logger_args,
                        save_config_callback=AlsoElsewhere, save_config_kwargs={"overwrite": overwrite,
                                                                                "config_filename": "run.yaml"})
        if overwrite:
            cli.trainer.fit(cli.model, cli.datamodule)
            assert sent == ["fit"] and (tmp_path / "run.yaml").is_file()
        else:
            with pytest.raises(ConfigError, match="already exists"):
                cli.trainer.fit(cli.model, cli.datamodule)
    cli = XtrainCLI(TinyClassifier, TinyData, run=False, trainer_defaults=defaults, args=logger_args,
                    save_config_callback=None)
    assert not any(type(c).__name__ == "SaveConfigCallback" for c in cli.trainer.callbacks)


def test_fit_loop_setup_data_and_counts_for_scripts() -> None:
    seen: dict[str, Any] = {}

    class SizedByLoader(TinyClassifier):
        def configure_optimizers(self) -> Any:
            self.trainer.fit_loop.setup_data()  # size a per-step schedule from the loader, before fit loads it
            per_epoch = len(self.trainer.train_dataloader)
            seen["per_epoch"], seen["max_epochs"] = per_epoch, self.trainer.fit_loop.max_epochs
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, epochs=2, steps_per_epoch=per_epoch)
            return [optimizer], [{"scheduler": scheduler, "interval": "step"}]

        def on_train_epoch_end(self) -> None:
            loop = self.trainer.fit_loop
            seen.setdefault("ends", []).append((loop.epoch_progress.current.completed, loop.total_batch_idx))

    trainer = quiet(max_epochs=2)
    trainer.fit(SizedByLoader(), TinyData())
    n = int(trainer.num_training_batches)  # limit_train_batches of quiet(); the loader itself is longer
    assert seen["per_epoch"] == len(trainer.train_dataloader) > 1 and seen["max_epochs"] == 2
    assert seen["ends"] == [(0, n), (1, 2 * n)] and trainer.fit_loop.epoch_progress.current.completed == 2
    trainer.fit_loop.max_epochs = 3  # scripts raise the limit to train on
    assert trainer.max_epochs == 3


def test_log_every_n_steps_counts_batches_under_manual_optimization(tmp_path: Path) -> None:
    import csv

    from xtrain.core import CSVLogger

    class LogsLoss(TwoOptimizers):
        def training_step(self, batch: Any, batch_idx: int) -> None:
            super().training_step(batch, batch_idx)
            self.log("seen", float(batch_idx))

    logger = CSVLogger(tmp_path)
    trainer = quiet(max_epochs=1, limit_train_batches=6, logger=logger, log_every_n_steps=2)
    trainer.fit(LogsLoss(), tiny_loaders()[0])
    assert trainer.global_step == 12  # two optimizer steps a batch...
    rows = [r for r in csv.DictReader(logger.metrics_file.open()) if r.get("seen")]
    # ...but the logs come every 2nd batch (3 rows, not 6) and their step counts batches
    assert [(r["step"], float(r["seen"])) for r in rows] == [("1", 1.0), ("3", 3.0), ("5", 5.0)]


def test_max_steps_mid_epoch_saves_that_epoch_and_best_resolves(tmp_path: Path) -> None:
    from xtrain.core import ModelCheckpoint

    train, val = tiny_loaders()
    trainer = quiet(max_steps=3, limit_train_batches=8, enable_checkpointing=True, default_root_dir=tmp_path)
    module = TinyClassifier()
    trainer.fit(module, train, val)  # stops inside epoch 0; no monitor: "best" is the last one saved
    assert Path(trainer.checkpoint_callback.best_model_path).name == "epoch=0-step=3.ckpt"  # type: ignore[union-attr]
    assert trainer.test(ckpt_path="best", dataloaders=val, verbose=False)[0]

    monitored = ModelCheckpoint(tmp_path / "monitored", monitor="val_loss")
    quiet(max_steps=3, limit_train_batches=8, callbacks=[monitored]).fit(TinyClassifier(), train, val)
    assert monitored.best_model_path == ""  # nothing validated yet: nothing to rank, so nothing saved


def test_learning_rate_monitor_values_reach_callback_metrics(tmp_path: Path) -> None:
    from xtrain.core import CSVLogger, LearningRateMonitor, ModelCheckpoint

    class Halving(TinyClassifier):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.4)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]

    # a checkpoint name may use the learning rate, as it can in Lightning
    names = ModelCheckpoint(tmp_path / "ckpts", filename="{epoch}-{lr-SGD:.2f}", save_top_k=-1)
    trainer = quiet(max_epochs=2, logger=CSVLogger(tmp_path), callbacks=[LearningRateMonitor("epoch"), names])
    trainer.fit(Halving(), tiny_loaders()[0])
    assert float(trainer.callback_metrics["lr-SGD"]) == pytest.approx(0.2)
    assert sorted(p.name for p in (tmp_path / "ckpts").iterdir()) == ["epoch=0-lr-SGD=0.40.ckpt",
                                                                      "epoch=1-lr-SGD=0.20.ckpt"]


def test_callback_metrics_hold_the_last_stages_results() -> None:
    module = TinyClassifier()
    train, val = tiny_loaders()
    trainer = quiet(max_epochs=1)
    trainer.fit(module, train, val)
    assert {"train_loss", "val_loss"} <= set(trainer.callback_metrics)
    results = trainer.test(module, val, verbose=False)
    assert set(trainer.callback_metrics) == set(results[0]) == {"test_loss", "test_acc"}
    trainer.validate(module, val, verbose=False)
    assert set(trainer.callback_metrics) == {"val_loss", "val_acc"}


def test_callback_metrics_taken_after_fit_survive_test(tmp_path: Path) -> None:
    # lightning-hydra-template's train.py merges the fit's and the test's metrics: {**after_fit, **after_test}.
    trainer = quiet(default_root_dir=tmp_path, max_epochs=1)
    train, val = tiny_loaders()
    module = TinyClassifier()
    trainer.fit(module, train, val)
    after_fit = trainer.callback_metrics
    fit_keys = sorted(after_fit)
    trainer.test(module, val, verbose=False)
    assert sorted(after_fit) == fit_keys and "val_loss" in fit_keys
    assert "test_loss" in trainer.callback_metrics and "val_loss" not in trainer.callback_metrics


@pytest.mark.parametrize("hook", ["validation_epoch_end", "training_epoch_end", "on_epoch_end"])
def test_a_removed_lightning_1_hook_is_refused_before_the_run(tmp_path: Path, hook: str) -> None:
    def removed(self: Any, *args: Any) -> None:
        raise AssertionError("never called")

    module = type("Legacy", (TinyClassifier,), {hook: removed})()
    trainer = quiet(default_root_dir=tmp_path, max_epochs=1)
    with pytest.raises(ConfigError, match=rf"model='Legacy': defines {hook}\(\), a Lightning 1.x hook that was "
                                          r"removed") as info:
        trainer.fit(module, *tiny_loaders())
    assert "Fix: move its code to on_" in str(info.value)
    assert trainer.global_step == 0


def test_a_callback_with_a_removed_hook_is_refused(tmp_path: Path) -> None:
    class OldTimer(Callback):
        def on_batch_end(self, trainer: Any, module: Any) -> None: ...

    with pytest.raises(ConfigError, match=r"callbacks='OldTimer': defines on_batch_end\(\).*Fix: move its code to "
                                          r"on_train_batch_end\(\)"):
        quiet(default_root_dir=tmp_path, callbacks=[OldTimer()]).fit(TinyClassifier(), tiny_loaders()[0])


def test_the_modules_prepare_data_runs_before_setup_in_every_stage(tmp_path: Path) -> None:
    calls: list[str] = []

    class Downloads(TinyClassifier):
        def prepare_data(self) -> None:
            calls.append("prepare_data")

        def setup(self, stage: str) -> None:
            calls.append(f"setup({stage})")

    module = Downloads()
    trainer = quiet(default_root_dir=tmp_path, max_epochs=1)
    train, val = tiny_loaders()
    trainer.fit(module, train, val)
    trainer.test(module, val, verbose=False)
    assert calls == ["prepare_data", "setup(fit)", "prepare_data", "setup(test)"]


def test_trainer_attributes_lightning_code_reads(tmp_path: Path) -> None:
    from xtrain.core.callbacks import EarlyStopping

    seen: dict[str, Any] = {}

    class ReadsTrainer(TinyClassifier):
        def configure_optimizers(self) -> Any:  # lightning-hydra-template: optimizer(params=trainer.model.parameters())
            seen["params"] = len(list(self.trainer.model.parameters()))
            return torch.optim.SGD(self.trainer.model.parameters(), lr=0.1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            seen["training"], seen["validating_in_train"] = self.trainer.training, self.trainer.validating
            return super().training_step(batch, batch_idx)

        def validation_step(self, batch: Any, batch_idx: int) -> Any:
            seen["validating"], seen["training_in_val"] = self.trainer.validating, self.trainer.training
            return super().validation_step(batch, batch_idx)

    stopper = EarlyStopping(monitor="val_loss")
    trainer = quiet(default_root_dir=tmp_path, max_epochs=1, callbacks=[stopper])
    module = ReadsTrainer()
    trainer.fit(module, *tiny_loaders())
    assert seen == {"params": 4, "training": True, "validating_in_train": False, "validating": True,
                    "training_in_val": False}
    assert trainer.precision == "32-true" and trainer.early_stopping_callback is stopper
    assert trainer.num_val_batches == [2] and trainer.num_test_batches == [] and trainer.ckpt_path is None
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    trainer.test(module, tiny_loaders()[1], ckpt_path=tmp_path / "a.ckpt", verbose=False)
    assert str(trainer.ckpt_path) == str(tmp_path / "a.ckpt") and not trainer.training


class Milestones(Callback):
    """A callback configured from the command line, as computer_vision_fine_tuning.py's BackboneFinetuning."""

    def __init__(self, milestones: tuple[int, int] = (5, 10), train_bn: bool = False) -> None:
        self.milestones, self.train_bn = milestones, train_bn


def test_a_cli_subclass_customizes_the_parser_and_runs_around_the_stage(tmp_path: Path) -> None:
    from xtrain.core.cli import XtrainCLI

    calls: list[str] = []

    class MyCLI(XtrainCLI):
        def add_arguments_to_parser(self, parser: Any) -> None:
            parser.add_lightning_class_args(Milestones, "finetuning")
            parser.set_defaults({"finetuning.milestones": [1, 3], "trainer.max_steps": 2})

        def before_instantiate_classes(self) -> None:
            calls.append(f"before_instantiate_classes(max_steps={self.config.trainer.max_steps})")

        def before_fit(self) -> None:
            calls.append(f"before_fit(step={self.trainer.global_step})")

        def after_fit(self) -> None:
            calls.append(f"after_fit(step={self.trainer.global_step})")

    cli = MyCLI(TinyClassifier, TinyData, save_config_callback=None, args=[
        "fit", "--finetuning.train_bn", "true", "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
        f"--trainer.default_root_dir={tmp_path}"])
    assert calls == ["before_instantiate_classes(max_steps=2)", "before_fit(step=0)", "after_fit(step=2)"]
    made = [cb for cb in cli.trainer.callbacks if isinstance(cb, Milestones)]
    assert len(made) == 1 and list(made[0].milestones) == [1, 3] and made[0].train_bn is True


def test_checkpoint_name_reads_zero_for_a_metric_not_logged_yet(tmp_path: Path) -> None:
    """Lightning fills a file-name metric that is not logged yet with 0 (``0-3-0.00.ckpt``); it read ``nan``."""
    from xtrain.core import ModelCheckpoint

    ckpt = ModelCheckpoint(tmp_path, filename="{epoch}-{step}-{val_loss:.2f}", every_n_train_steps=2, save_top_k=-1,
                           auto_insert_metric_name=False)
    trainer = Trainer(max_steps=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[ckpt], num_sanity_val_steps=0)
    trainer.fit(TinyClassifier(), tiny_loaders(n=32)[0])
    assert sorted(p.name for p in tmp_path.glob("*.ckpt")) == ["0-2-0.00.ckpt"]


def test_epoch_means_accumulate_in_float64_under_64_true() -> None:
    """Under ``precision="64-true"`` an epoch mean of float32 losses is accumulated in float64, as Lightning's (its
    accumulators take the float64 default dtype the steps run under); it was float32 (1e-7 off)."""
    batches = [torch.full((4, 16), float(i)) / 7 for i in range(8)]

    class Float32Loss(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", (batch[0].float().mean() * 1.1).float())

    trainer = Trainer(precision="64-true", logger=False, enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=False)
    loader = DataLoader(TensorDataset(torch.cat(batches), torch.zeros(32, dtype=torch.long)), batch_size=4)
    (result,) = trainer.validate(Float32Loss(), loader, verbose=False)
    value = trainer.callback_metrics["val_loss"]
    exact = sum(float(b.float().mean() * 1.1) for b in batches) / 8  # the float32 values, averaged in float64
    assert value.dtype == torch.float64 and result["val_loss"] == pytest.approx(exact, rel=1e-15, abs=0)
