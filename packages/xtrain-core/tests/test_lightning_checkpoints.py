"""Checkpoints written by Lightning, as a user migrating from it meets them (outside trial CK, beside Lightning 2.6.6).

The files are laid out as Lightning 2.6.6 writes them (its top-level keys, the data module's state under its class's
name, LightningCLI's ``class_path`` hyperparameters: compared with real files in the trial); Lightning itself is not
installed where these tests run.
"""

from __future__ import annotations

import enum
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import CheckpointError, DataModule, ModelCheckpoint, Trainer, TrainModule
from xtrain.core.testing.models import TinyClassifier, TinyData


class CountingData(TinyData):
    """A data module with a state (as a curriculum keeps one)."""

    def __init__(self, batch_size: int = 16, n: int = 256) -> None:
        super().__init__(batch_size=batch_size, n=n)
        self.epochs_seen = 0

    def state_dict(self) -> dict[str, Any]:
        return {"epochs_seen": self.epochs_seen}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epochs_seen = state_dict["epochs_seen"]


class ReadsCustomKey(TinyClassifier):
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.custom = checkpoint.get("custom")


def _lightning_file(path: Path, module: TrainModule, *, datamodule: DataModule | None = None,
                    hparams: dict[str, Any] | None = None, **extra: Any) -> Path:
    """A checkpoint with the entries Lightning 2.6.6's ``dump_checkpoint`` writes."""
    checkpoint: dict[str, Any] = {
        "epoch": 2, "global_step": 12, "pytorch-lightning_version": "2.6.6", "state_dict": module.state_dict(),
        "loops": {"fit_loop": {"state_dict": {}}}, "callbacks": {}, "optimizer_states": [{}], "lr_schedulers": [],
        "hparams_name": "kwargs", "hyper_parameters": dict(module.hparams) if hparams is None else hparams, **extra}
    if datamodule is not None:
        checkpoint["datamodule_hparams_name"] = "kwargs"
        checkpoint["datamodule_hyper_parameters"] = dict(datamodule.hparams)
        checkpoint[type(datamodule).__qualname__] = datamodule.state_dict()
    torch.save(checkpoint, path)
    return path


def _trainer(tmp_path: Path, **options: Any) -> Trainer:
    settings: dict[str, Any] = {"accelerator": "cpu", "max_epochs": 1, "logger": False, "enable_checkpointing": False,
                                "enable_progress_bar": False, "enable_model_summary": False,
                                "default_root_dir": tmp_path}
    return Trainer(**(settings | options))


def _trained() -> TinyClassifier:
    torch.manual_seed(3)
    return TinyClassifier()


def test_validate_test_and_predict_take_a_lightning_file_as_ckpt_path(tmp_path: Path) -> None:
    source, data = _trained(), CountingData()
    data.epochs_seen = 3
    path = _lightning_file(tmp_path / "last.ckpt", source, datamodule=data, custom={"who": "lightning"})
    expected = _trainer(tmp_path / "e").validate(source, CountingData(), verbose=False)

    for stage in ("validate", "test", "predict"):
        torch.manual_seed(0)
        model, datamodule = ReadsCustomKey(), CountingData()
        assert not torch.equal(model.net[0].weight, source.net[0].weight)
        result = getattr(_trainer(tmp_path / stage), stage)(model, datamodule, ckpt_path=path)
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), source.state_dict().values(),
                                                     strict=True)), stage
        assert model.custom == {"who": "lightning"} and datamodule.epochs_seen == 3, stage  # as Lightning restores
        if stage == "validate":
            assert result == expected


def test_fit_from_a_lightning_file_is_refused_naming_what_works(tmp_path: Path) -> None:
    path = _lightning_file(tmp_path / "last.ckpt", _trained())
    with pytest.raises(CheckpointError, match=r"written by Lightning 2\.6\.6: fit cannot resume.*"
                                              r"load_from_checkpoint\(path\).*validate, test and predict take"):
        _trainer(tmp_path).fit(TinyClassifier(), TinyData(), ckpt_path=str(path))


def test_a_lightning_file_with_other_shapes_is_refused_before_anything_loads(tmp_path: Path) -> None:
    path = _lightning_file(tmp_path / "wide.ckpt", TinyClassifier(classes=6))
    model = TinyClassifier()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=r"(?s)wide\.ckpt.*net\.3\.weight.*load_from_checkpoint\(path\)"):
        _trainer(tmp_path).test(model, TinyData(), ckpt_path=str(path))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_auto_skips_lightning_files_in_the_checkpoint_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A migrated script whose ModelCheckpoint writes into the folder Lightning used: 'auto' starts fresh."""
    monkeypatch.setenv("XTRAIN_RUN_ID", "migrated")
    folder = tmp_path / "ck"
    folder.mkdir()
    _lightning_file(folder / "last.ckpt", _trained())
    trainer = _trainer(tmp_path, enable_checkpointing=True,
                       callbacks=[ModelCheckpoint(dirpath=folder, save_last=True)])
    trainer.fit(TinyClassifier(), TinyData(n=64), ckpt_path="auto")
    assert trainer.global_step == 4
    assert "skipping" in (out := capsys.readouterr().out) and "written by Lightning, not by xtrain" in out
    assert (folder / "last-v1.ckpt").exists()  # Lightning's file is left as it was


class PartlySaved(TinyClassifier):
    """A fine-tune whose checkpoints hold only the trainable head, as Lightning's strict_loading documents."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__(lr=lr)
        self.strict_loading = False


def _head_only(tmp_path: Path, source: TinyClassifier) -> Path:
    """A Lightning file of the last layer only (the trainable head of a fine-tune)."""
    head = {k: v for k, v in source.state_dict().items() if k.startswith("net.3")}
    path = tmp_path / "head.ckpt"
    torch.save({"pytorch-lightning_version": "2.6.6", "state_dict": head, "hyper_parameters": {"lr": 0.1}}, path)
    return path


def test_load_from_checkpoint_follows_the_modules_strict_loading(tmp_path: Path) -> None:
    source = PartlySaved()
    path = _head_only(tmp_path, source)
    with pytest.warns(UserWarning, match=r"missing keys \['net\.0\.weight', 'net\.0\.bias'\]"):
        loaded = PartlySaved.load_from_checkpoint(path)
    assert torch.equal(loaded.net[3].weight, source.net[3].weight)
    with pytest.raises(CheckpointError, match=r"lacks some of TinyClassifier's weights: pass strict=False.*"
                                              r"strict_loading = False"):
        TinyClassifier.load_from_checkpoint(path)


def test_a_lightning_datamodule_state_is_restored_by_load_from_checkpoint(tmp_path: Path) -> None:
    data = CountingData(batch_size=8)
    data.epochs_seen = 5
    path = _lightning_file(tmp_path / "dm.ckpt", _trained(), datamodule=data)
    loaded = CountingData.load_from_checkpoint(path)
    assert loaded.epochs_seen == 5 and loaded.batch_size == 8


@pytest.mark.parametrize("layout", ["fsdp", "deepspeed"])
def test_lightning_sharded_folders_name_lightnings_tools(tmp_path: Path, layout: str) -> None:
    folder = tmp_path / "epoch=0.ckpt"
    folder.mkdir()
    if layout == "fsdp":
        (folder / "meta.pt").write_bytes(b"x")
        (folder / ".metadata").write_bytes(b"x")
        tool = r"lightning\.pytorch\.utilities\.consolidate_checkpoint"
    else:
        (folder / "latest").write_text("checkpoint")
        (folder / "checkpoint").mkdir()
        (folder / "checkpoint" / "mp_rank_00_model_states.pt").write_bytes(b"x")
        tool = r"convert_zero_checkpoint_to_fp32_state_dict"
    with pytest.raises(CheckpointError, match=tool):
        TinyClassifier.load_from_checkpoint(folder)
    with pytest.raises(CheckpointError, match=tool):
        _trainer(tmp_path).test(TinyClassifier(), TinyData(), ckpt_path=str(folder))


class Encoded(TrainModule):
    def __init__(self, encoder: torch.nn.Module, hidden: int = 7) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["encoder"])
        self.encoder = encoder


def test_lightning_cli_class_paths_are_refused_with_the_object_to_pass(tmp_path: Path) -> None:
    torch.manual_seed(0)
    source = Encoded(torch.nn.Linear(8, 5))
    saved = {"encoder": {"class_path": "torch.nn.Linear", "init_args": {"in_features": 8, "out_features": 5}},
             "hidden": 7, "_instantiator": "lightning.pytorch.cli.instantiate_module"}
    path = _lightning_file(tmp_path / "cli.ckpt", source, hparams=saved)
    with pytest.raises(CheckpointError, match=r"\['encoder'\] of Encoded were saved by LightningCLI.*never imports.*"
                                              r"Encoded\.load_from_checkpoint\(path, encoder=torch\.nn\.Linear\("
                                              r"in_features=8, out_features=5\)\)"):
        Encoded.load_from_checkpoint(path)
    loaded = Encoded.load_from_checkpoint(path, encoder=torch.nn.Linear(8, 5))
    assert torch.equal(loaded.encoder.weight, source.encoder.weight) and "_instantiator" not in loaded.hparams


def test_a_zip_archive_torch_did_not_write_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "model.ckpt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(CheckpointError, match=r"is a zip archive that torch\.save did not write .*'readme\.txt'"):
        TinyClassifier.load_from_checkpoint(path)


class Act(enum.Enum):
    RELU = "relu"


def test_an_object_in_the_hyperparameters_names_add_safe_globals(tmp_path: Path) -> None:
    """Lightning stores an Enum hyperparameter as the object; the refusal names the allowlist that keeps it."""
    path = _lightning_file(tmp_path / "enum.ckpt", _trained(), hparams={"lr": 0.1, "act": Act.RELU})
    with pytest.raises(CheckpointError, match=r"Unsupported global.*Act.*if you trust this class/function\.\)"
                                              r".*add_safe_globals\(\[TheClass, \.\.\.\]\) keeps the hyperparameters"):
        TinyClassifier.load_from_checkpoint(path)
    assert not (tmp_path / "ran").exists()


class KeepsAnObject(TinyClassifier):
    def __init__(self, lr: float = 0.1, act: Any = Act.RELU) -> None:
        super().__init__(lr=lr)
        self.save_hyperparameters()


def test_an_unsaved_hyperparameter_is_warned_once_per_module_not_at_every_save(tmp_path: Path) -> None:
    model = KeepsAnObject()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _trainer(tmp_path, max_epochs=3, enable_checkpointing=True).fit(model, TinyData(n=32))
    told = [w for w in seen if "are not plain values" in str(w.message)]
    assert len(told) == 1 and "['act']" in str(told[0].message)


class Normed(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("out", self.net(batch[0]).mean())


def test_a_state_without_batch_norms_step_counter_loads_as_torch_loads_it(tmp_path: Path) -> None:
    """torch fills a batch norm's num_batches_tracked missing from a state without version metadata (Lightning
    accepts such files); the plan must not refuse what load_state_dict takes."""
    source = Normed()
    state = {k: v for k, v in source.state_dict().items() if not k.endswith("num_batches_tracked")}
    path = tmp_path / "nbt.ckpt"
    torch.save({"pytorch-lightning_version": "2.6.6", "state_dict": state, "hyper_parameters": {}}, path)
    loaded = Normed.load_from_checkpoint(path)
    assert torch.equal(loaded.net[1].running_mean, source.net[1].running_mean)
    model = Normed()
    _trainer(tmp_path).validate(model, DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4), ckpt_path=str(path),
                               verbose=False)
    assert torch.equal(model.net[1].running_var, source.net[1].running_var)


def test_a_partial_file_in_test_names_strict_loading_and_a_strict_call_names_strict(tmp_path: Path) -> None:
    source = TinyClassifier()
    path = _head_only(tmp_path, source)
    with pytest.raises(CheckpointError, match=r"lacks some of the module's weights: set self.strict_loading = False"):
        _trainer(tmp_path).test(TinyClassifier(), TinyData(), ckpt_path=str(path))
    with pytest.raises(CheckpointError, match=r"pass strict=False to load those it has\.$"):
        PartlySaved.load_from_checkpoint(path, strict=True)  # strict_loading is already False: not suggested again
    with pytest.warns(UserWarning, match=r"with strict_loading=False: missing keys"):
        PartlySaved.load_from_checkpoint(path)


class Configured(TrainModule):
    def __init__(self, encoder: torch.nn.Module, optimizer: Callable[..., torch.optim.Optimizer]) -> None:
        super().__init__()
        self.encoder, self.optimizer = encoder, optimizer


def test_lightning_cli_messages_build_nested_classes_and_partial_callables(tmp_path: Path) -> None:
    saved = {"encoder": {"class_path": "torch.nn.Sequential",
                         "init_args": {"act": {"class_path": "torch.nn.Tanh"}}},
             "optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.05}}}
    path = _lightning_file(tmp_path / "cli.ckpt", Encoded(torch.nn.Linear(8, 5)), hparams=saved)
    with pytest.raises(CheckpointError, match=r"encoder=torch\.nn\.Sequential\(act=torch\.nn\.Tanh\(\)\), "
                                              r"optimizer=functools\.partial\(torch\.optim\.SGD, lr=0\.05\)\)"):
        Configured.load_from_checkpoint(path)


def test_last_choosing_lightnings_file_in_fit_names_auto(tmp_path: Path) -> None:
    folder = tmp_path / "ck"
    folder.mkdir()
    _lightning_file(folder / "last.ckpt", _trained())
    trainer = _trainer(tmp_path, enable_checkpointing=True, callbacks=[ModelCheckpoint(dirpath=folder, save_last=True)])
    with pytest.raises(CheckpointError, match=r"ckpt_path='last' chose it.*pass ckpt_path='auto'"):
        trainer.fit(TinyClassifier(), TinyData(n=32), ckpt_path="last")
