"""Hostile checkpoints: no payload ever runs, and every one is refused with a CheckpointError naming the file.

Each case damages a genuine checkpoint the way an attacker would (a pickle payload in every file of both layouts,
symlinks out of the directory, ``..`` in names, impossible sizes). Where the manifest's checksums would catch the
change first, the attacker's edit recomputes them (``rehash``), so the check behind them is the one tested.
"""

from __future__ import annotations

import io
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from checkpoint_helpers import (
    MARKER_ENV,
    Payload,
    WrappedPayload,
    data_dir,
    manifest,
    metadata,
    quiet_trainer,
    rehash,
    write_manifest_file,
)
from xtrain.core import CheckpointError, Engine
from xtrain.core.checkpoint_reader import read_checkpoint
from xtrain.core.testing import TinyClassifier, tiny_loaders


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "pwned"
    monkeypatch.setenv(MARKER_ENV, str(path))
    return path


def _full_pickle_payload(full: Path, work: Path) -> Path:
    path = work / "evil.ckpt"
    checkpoint = torch.load(full, weights_only=True)
    checkpoint["extra"] = Payload()
    torch.save(checkpoint, path)
    return path


def _full_raw_pickle(full: Path, work: Path) -> Path:
    path = work / "raw.ckpt"
    path.write_bytes(pickle.dumps(Payload()))
    return path


def _sharded_metadata_payload(sharded: Path) -> Path:
    (data_dir(sharded) / ".metadata").write_bytes(pickle.dumps(Payload()))
    rehash(sharded)
    return sharded


def _sharded_metadata_wrapped(sharded: Path) -> Path:
    file = data_dir(sharded) / ".metadata"
    file.write_bytes(pickle.dumps(WrappedPayload(file.read_bytes())))
    rehash(sharded)
    return sharded


def _sharded_rest_payload(sharded: Path) -> Path:
    torch.save({"loops": Payload()}, data_dir(sharded) / "rest.pt")
    rehash(sharded)
    return sharded


def _sharded_distcp_payload(sharded: Path) -> Path:
    meta = metadata(sharded)
    shard = next(data_dir(sharded).glob("*.distcp"))
    blob = io.BytesIO()
    torch.save(Payload(), blob)
    shard.write_bytes(blob.getvalue())
    for info in meta.storage_data.values():
        info.offset, info.length = 0, len(blob.getvalue())
    _write_metadata(sharded, meta)
    return sharded


def _sharded_data_symlink(sharded: Path) -> Path:
    data = data_dir(sharded)
    outside = sharded.parent / "outside"
    shutil.move(data, outside)
    data.symlink_to(outside, target_is_directory=True)
    return sharded


def _sharded_data_dotdot(sharded: Path) -> Path:
    content = manifest(sharded)
    shutil.move(sharded / content["data"], sharded.parent / "outside")
    content["data"] = "../outside"
    write_manifest_file(sharded, content)
    return sharded


def _sharded_shard_symlink(sharded: Path) -> Path:
    shard = next(data_dir(sharded).glob("*.distcp"))
    outside = sharded.parent / "outside.distcp"
    shutil.move(shard, outside)
    shard.symlink_to(outside)
    return sharded


def _sharded_storage_dotdot(sharded: Path) -> Path:
    meta = metadata(sharded)
    shard = next(data_dir(sharded).glob("*.distcp"))
    shutil.copy(shard, sharded.parent / "evil.distcp")
    for info in meta.storage_data.values():
        info.relative_path = "../../evil.distcp"
    _write_metadata(sharded, meta)
    return sharded


def _write_metadata(sharded: Path, meta: Any) -> None:
    """Write DCP metadata back into ``sharded`` and re-seal its checksums, so only the edit is wrong."""
    (data_dir(sharded) / ".metadata").write_bytes(pickle.dumps(meta))
    rehash(sharded)


def _edit_first_weight(sharded: Path, edit: Callable[[Any], None]) -> Path:
    """Apply ``edit`` to the metadata entry of the checkpoint's first weight, then write the metadata back."""
    meta = metadata(sharded)
    edit(meta.state_dict_metadata[next(k for k in meta.state_dict_metadata if k.startswith("state_dict."))])
    _write_metadata(sharded, meta)
    return sharded


def _sharded_huge_size(sharded: Path) -> Path:
    def edit(entry: Any) -> None:
        entry.size = torch.Size([2**40, 2**10])

    return _edit_first_weight(sharded, edit)


def _sharded_no_chunks(sharded: Path) -> Path:
    def edit(entry: Any) -> None:
        entry.chunks = []  # nothing read: the load would hand back torch.empty's memory

    return _edit_first_weight(sharded, edit)


def _sharded_chunk_outside(sharded: Path) -> Path:
    def edit(entry: Any) -> None:
        entry.chunks[0].offsets = torch.Size([n + 1 for n in entry.chunks[0].offsets])

    return _edit_first_weight(sharded, edit)


def _sharded_rest_symlink_unchecked(sharded: Path) -> Path:
    data = data_dir(sharded)
    outside = sharded.parent / "someone_elses_rest.pt"
    shutil.move(data / "rest.pt", outside)
    (data / "rest.pt").symlink_to(outside)
    content = manifest(sharded)
    content["xtrain"]["checksums"] = "none"  # as TorchCheckpointIO(checksums=False) writes: nothing verified
    write_manifest_file(sharded, content)
    return sharded


def _sharded_size_an_int(sharded: Path) -> Path:
    def edit(entry: Any) -> None:
        entry.size = 5

    return _edit_first_weight(sharded, edit)


def _sharded_deep_manifest(sharded: Path) -> Path:
    (sharded / "xtrain.json").write_text("[" * 100000 + "]" * 100000)
    return sharded


def _sharded_manifest_symlink(sharded: Path) -> Path:
    real = sharded.parent / "elsewhere.json"
    shutil.move(sharded / "xtrain.json", real)
    (sharded / "xtrain.json").symlink_to(real)
    return sharded


def _sharded_checksum_dotdot(sharded: Path) -> Path:
    content = manifest(sharded)
    content["xtrain"]["checksums"]["files"]["../../etc/passwd"] = [0, 0]
    write_manifest_file(sharded, content)
    return sharded


FULL: dict[str, Callable[[Path, Path], Path]] = {"pickle payload": _full_pickle_payload,
                                                 "raw pickle": _full_raw_pickle}
SHARDED: dict[str, Callable[[Path], Path]] = {
    "metadata payload": _sharded_metadata_payload, "metadata payload returning the real metadata":
    _sharded_metadata_wrapped, "rest.pt payload": _sharded_rest_payload, "distcp payload": _sharded_distcp_payload,
    "data dir symlink": _sharded_data_symlink, "data dir ..": _sharded_data_dotdot,
    "shard symlink": _sharded_shard_symlink, "storage path ..": _sharded_storage_dotdot,
    "huge declared size": _sharded_huge_size, "manifest symlink": _sharded_manifest_symlink,
    "checksum list ..": _sharded_checksum_dotdot, "tensor without chunks": _sharded_no_chunks,
    "chunk outside the tensor": _sharded_chunk_outside, "rest.pt symlink, checksums off":
    _sharded_rest_symlink_unchecked, "tensor size an int": _sharded_size_an_int,
    "deeply nested manifest": _sharded_deep_manifest,
}


@pytest.mark.parametrize("case", sorted(FULL))
def test_hostile_full_checkpoints_are_refused_unrun(case: str, genuine: tuple[Path, Path], tmp_path: Path,
                                                    marker: Path) -> None:
    path = FULL[case](genuine[0], tmp_path)
    for verify in (True, False):
        with pytest.raises(CheckpointError) as info:
            read_checkpoint(path, verify=verify)
        assert str(path) in str(info.value)
        assert "will likely succeed" not in str(info.value), "never relay torch's advice to retry unsafely"
    assert not marker.exists(), "the payload ran"


@pytest.mark.parametrize("case", sorted(SHARDED))
def test_hostile_sharded_checkpoints_are_refused_unrun(case: str, genuine: tuple[Path, Path], tmp_path: Path,
                                                       marker: Path) -> None:
    sharded = tmp_path / "work" / "sharded.ckpt"
    shutil.copytree(genuine[1], sharded)
    path = SHARDED[case](sharded)
    for verify in (True, False):
        with pytest.raises(CheckpointError) as info:
            read_checkpoint(path, verify=verify)
        assert str(path) in str(info.value)
    assert not marker.exists(), "the payload ran"


def test_every_entry_point_refuses_a_metadata_payload(genuine: tuple[Path, Path], tmp_path: Path, marker: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Trainer (fit/validate), Engine.load and the CLI's inspect and consolidate all read through the gate."""
    from xtrain.core.cli import main

    sharded = tmp_path / "sharded.ckpt"
    shutil.copytree(genuine[1], sharded)
    _sharded_metadata_wrapped(sharded)

    train, val = tiny_loaders(n=32)
    with pytest.raises(CheckpointError, match="refused unread") as info:
        quiet_trainer(tmp_path / "fit").fit(TinyClassifier(), train, ckpt_path=sharded)
    assert str(sharded) in str(info.value)
    with pytest.raises(CheckpointError, match="refused unread"):
        quiet_trainer(tmp_path / "validate").validate(TinyClassifier(), val, ckpt_path=sharded)
    engine = Engine(accelerator="cpu", devices=1)
    engine.launch()
    with pytest.raises(CheckpointError, match="refused unread"):
        engine.load(sharded, {"state_dict": engine.setup(TinyClassifier())})
    for argv in (["checkpoint", "inspect", str(sharded)], ["checkpoint", "consolidate", str(sharded),
                                                          str(tmp_path / "one.ckpt")]):
        assert main(argv) != 0
        assert "refused unread" in capsys.readouterr().err
    assert not (tmp_path / "one.ckpt").exists()
    assert not marker.exists(), "the payload ran"


def test_a_genuine_sharded_checkpoint_still_loads(genuine: tuple[Path, Path]) -> None:
    full, sharded = genuine
    a, b = read_checkpoint(full), read_checkpoint(sharded)
    for key, tensor in a["state_dict"].items():
        assert torch.equal(tensor, b["state_dict"][key])
    assert b["xtrain"]["checksums"]["algorithm"] == "crc32"
    assert os.path.basename(str(full)) == "last.ckpt"


def _checkpointing_trainer(root: Path, epochs: int) -> Any:
    from xtrain.core import ModelCheckpoint, Trainer

    return Trainer(accelerator="cpu", max_epochs=epochs, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, default_root_dir=root, limit_train_batches=2,
                   callbacks=[ModelCheckpoint(dirpath=root / "ckpt", save_top_k=1)])


def test_a_checkpoints_ranking_never_makes_the_run_delete_outside_its_directory(tmp_path: Path) -> None:
    from xtrain.core.defaults.torch_io import save_file

    _checkpointing_trainer(tmp_path / "attacker", 1).fit(TinyClassifier(), tiny_loaders()[0])
    source = next((tmp_path / "attacker" / "ckpt").glob("epoch=*.ckpt"))
    checkpoint = torch.load(source, weights_only=True)
    victim = tmp_path / "home"
    (victim / "thesis").mkdir(parents=True)
    (victim / "thesis" / "chapter1.tex").write_text("years of work\n")
    outside_ckpt = tmp_path / "other_run.ckpt"
    outside_ckpt.write_bytes(b"another run's checkpoint")
    key = next(iter(checkpoint["callbacks"]))
    checkpoint["callbacks"][key]["best_k_models"] = {str(victim): -2.0, str(outside_ckpt): -1.0}
    checkpoint["loops"]["epoch"] = 0
    save_file(checkpoint, tmp_path / "downloaded.ckpt")
    trainer = _checkpointing_trainer(tmp_path / "user", 2)
    trainer.fit(TinyClassifier(), tiny_loaders()[0], ckpt_path=tmp_path / "downloaded.ckpt")
    assert (victim / "thesis" / "chapter1.tex").read_text() == "years of work\n"
    assert outside_ckpt.exists(), "a .ckpt outside this run's checkpoint directory is not this run's to prune"
    kept = sorted(p.name for p in (tmp_path / "user" / "ckpt").glob("*.ckpt"))
    assert kept == ["epoch=1-step=6.ckpt"], "its own older checkpoint is still pruned (save_top_k=1)"


def test_pruning_owns_only_files_directly_in_its_directory_however_spelled(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from xtrain.core.callbacks import ModelCheckpoint

    run = tmp_path / "run" / "ckpt"
    run.mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "run")
    (run / "a.ckpt").write_bytes(b"x")
    (run / "lnk.ckpt").symlink_to(run / "a.ckpt")
    monkeypatch.chdir(tmp_path)
    owns = ModelCheckpoint()._owns
    assert owns(str(run / "a.ckpt"), run)  # the same spelling: no resolving needed
    assert owns("run/ckpt/a.ckpt", run), "a relative spelling of the same directory"
    assert owns(str(tmp_path / "link" / "ckpt" / "a.ckpt"), run), "the directory through a symlink"
    assert owns(str(run / "a.ckpt"), Path("run/ckpt"))
    assert not owns(str(run / ".." / "a.ckpt"), run), "'..' leaves the directory"
    assert not owns(str(run / "lnk.ckpt"), run), "a symlink may point anywhere"
    assert not owns(str(run / "notes.txt"), run)
    assert not owns(str(tmp_path / "a.ckpt"), run)


class _Scheduled(TinyClassifier):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.9 ** e)}


def _tamper_version(checkpoint: dict[str, Any], elsewhere: Path) -> None:
    checkpoint["loggers"][0]["version"] = str(elsewhere)


def _tamper_rows(checkpoint: dict[str, Any], elsewhere: Path) -> None:
    checkpoint["loggers"][0]["rows"] = "12"


def _tamper_loggers_none(checkpoint: dict[str, Any], elsewhere: Path) -> None:
    checkpoint["loggers"] = None


def _tamper_seed(checkpoint: dict[str, Any], elsewhere: Path) -> None:
    checkpoint["sampler"]["epoch_seed"] = 2**70  # passed as an int, crashed torch.Generator at the first batch


def _tamper_step(checkpoint: dict[str, Any], elsewhere: Path) -> None:
    checkpoint["loops"]["global_step"] = 2**70


def _tamper_lambdas(checkpoint: dict[str, Any], elsewhere: Path) -> None:
    checkpoint["lr_schedulers"][0]["lr_lambdas"] = [None, {}]  # the scheduler has one parameter group


@pytest.mark.parametrize(("tamper", "message"), [
    (_tamper_version, "is not a version number or a plain directory name"),
    (_tamper_rows, "rows '12' is not a number of rows"),
    # Once torch's IndexError in the scheduler's own load; the plan now sees a list of another length than the groups.
    (_tamper_lambdas, r"lr_schedulers\[0\].lr_lambdas: 2 values, one per parameter group of an optimizer with 1"),
    (_tamper_loggers_none, "loggers: not a collection of state dicts"),
    (_tamper_seed, r"sampler: .* with both in \[0, 2\*\*63\)"),
    (_tamper_step, "loops: counters global_step negative or beyond 64 bits"),
], ids=["logger-version-is-a-path", "logger-rows-not-an-int", "scheduler-refuses", "loggers-none", "seed-too-large",
        "step-too-large"])
def test_a_state_the_plan_cannot_see_fails_before_any_weight_is_loaded(
        tmp_path: Path, tamper: Callable[[dict[str, Any], Path], None], message: str) -> None:
    from xtrain.core import CSVLogger, Trainer
    from xtrain.core.defaults.torch_io import save_file

    def trainer(name: str, epochs: int) -> Trainer:
        return Trainer(accelerator="cpu", max_epochs=epochs, logger=CSVLogger(tmp_path / name), limit_train_batches=2,
                       enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path / name)

    trainer("a", 1).fit(_Scheduled(), tiny_loaders()[0])
    checkpoint = torch.load(next((tmp_path / "a").rglob("last.ckpt")), weights_only=True)
    tamper(checkpoint, tmp_path / "elsewhere")
    save_file(checkpoint, tmp_path / "bad.ckpt")
    model = _Scheduled()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=message):
        trainer("b", 3).fit(model, tiny_loaders()[0], ckpt_path=tmp_path / "bad.ckpt")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()), "no weight of the file loaded"
    assert not (tmp_path / "elsewhere").exists()
