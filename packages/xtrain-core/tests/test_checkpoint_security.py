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
    to_sharded,
    train_full,
    write_manifest_file,
)
from xtrain.core import CheckpointError, Engine
from xtrain.core.checkpoint_reader import read_checkpoint
from xtrain.core.testing import TinyClassifier, tiny_loaders


@pytest.fixture(scope="module")
def genuine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("genuine")
    full, _ = train_full(root)
    return full, to_sharded(full, root / "sharded.ckpt")


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
    (data_dir(sharded) / ".metadata").write_bytes(pickle.dumps(meta))
    rehash(sharded)
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
    (data_dir(sharded) / ".metadata").write_bytes(pickle.dumps(meta))
    rehash(sharded)
    return sharded


def _sharded_huge_size(sharded: Path) -> Path:
    meta = metadata(sharded)
    key = next(k for k in meta.state_dict_metadata if k.startswith("state_dict."))
    meta.state_dict_metadata[key].size = torch.Size([2**40, 2**10])
    (data_dir(sharded) / ".metadata").write_bytes(pickle.dumps(meta))
    rehash(sharded)
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
    "checksum list ..": _sharded_checksum_dotdot,
}


@pytest.mark.parametrize("case", sorted(FULL))
def test_hostile_full_checkpoints_are_refused_unrun(case: str, genuine: tuple[Path, Path], tmp_path: Path,
                                                    marker: Path) -> None:
    path = FULL[case](genuine[0], tmp_path)
    for verify in (True, False):
        with pytest.raises(CheckpointError) as info:
            read_checkpoint(path, verify=verify)
        assert str(path) in str(info.value)
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
