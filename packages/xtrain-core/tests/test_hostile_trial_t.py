"""Hostile files from the third outside trial.

A ``.metadata`` pickle used ``BUILD`` on an allowlisted class to set ``PosixPath.is_symlink`` for the whole process,
which switched off the symlink checks; a damaged manifest key (``checksumr``) silently turned checksum verification
off; an image was reported as a hostile pickle and a text file as ``KeyError: 101``; optimizer hyperparameters that
torch refuses when an optimizer is built (``betas=(5.0, 0.999)``) and a negative ``step`` were loaded.
"""

from __future__ import annotations

import os
import pathlib
import shutil
from pathlib import Path

import pytest
import torch

from checkpoint_helpers import data_dir, manifest, quiet_trainer, train_full, write_manifest_file
from xtrain.core import CheckpointError
from xtrain.core.checkpoint_reader import read_checkpoint
from xtrain.core.testing import TinyClassifier, tiny_loaders

# PosixPath, (None, {"is_symlink": torch.Size}), BUILD, POP: setattr on the class itself.
_POISON = (b"cpathlib\nPosixPath\nN}X" + len(b"is_symlink").to_bytes(4, "little") + b"is_symlink"
           + b"ctorch\nSize\ns\x86b0")


def test_metadata_that_sets_attributes_of_a_class_is_refused_and_changes_nothing(sharded: Path,
                                                                                   tmp_path: Path) -> None:
    data = data_dir(sharded)
    genuine = (data / ".metadata").read_bytes()
    (data / ".metadata").write_bytes(genuine[:2] + _POISON + genuine[2:])
    outside = tmp_path / "outside.distcp"  # the shard moved out and linked back: what the poison was to hide
    shard = next(data.glob("*.distcp"))
    shutil.move(shard, outside)
    os.symlink(outside, shard)
    content = manifest(sharded)
    content["xtrain"]["checksums"] = "none"
    write_manifest_file(sharded, content)
    before = pathlib.PosixPath.is_symlink
    with pytest.raises(CheckpointError, match="sets the state of a type") as refused:
        read_checkpoint(sharded)
    assert "nothing in it was executed" in str(refused.value)
    assert pathlib.PosixPath.is_symlink is before
    assert shard.is_symlink()


def test_genuine_metadata_still_loads(sharded: Path) -> None:
    assert set(read_checkpoint(sharded)["state_dict"]) == set(TinyClassifier().state_dict())


@pytest.mark.parametrize(("key", "damaged"), [("checksums", "checksumr"), ("world_size", "world_sise")])
def test_a_damaged_manifest_key_is_refused_naming_the_field(sharded: Path, key: str, damaged: str) -> None:
    content = manifest(sharded)
    content["xtrain"][damaged] = content["xtrain"].pop(key)
    write_manifest_file(sharded, content)
    with pytest.raises(CheckpointError) as refused:
        read_checkpoint(sharded)
    message = str(refused.value)
    assert repr(damaged) in message and f"a damaged {key!r}" in message and "pip install -U xtrain-core" in message


def test_a_checksums_value_that_is_neither_crc32_nor_none_is_refused(sharded: Path) -> None:
    content = manifest(sharded)
    content["xtrain"]["checksums"] = "nonf"
    write_manifest_file(sharded, content)
    with pytest.raises(CheckpointError, match="'checksums' is 'nonf', neither 'crc32' nor 'none'"):
        read_checkpoint(sharded)


def test_a_manifest_without_checksums_still_loads(sharded: Path) -> None:
    """Release 1 wrote none: such a checkpoint loads (unverified), as before."""
    content = manifest(sharded)
    del content["xtrain"]["checksums"]
    write_manifest_file(sharded, content)
    assert "state_dict" in read_checkpoint(sharded)


@pytest.mark.parametrize(("content", "said"), [
    (b"\x89PNG\r\n\x1a\n" + bytes(100), "is not a checkpoint file"),
    (b"hello, this is text\n", "is not a checkpoint file"),
    (b"", r"is empty \(0 bytes\)"),
])
def test_a_file_that_is_no_checkpoint_is_called_so(tmp_path: Path, content: bytes, said: str) -> None:
    path = tmp_path / "some.ckpt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=said) as refused:
        read_checkpoint(path)
    assert str(path) in str(refused.value) and "hostile" not in str(refused.value)
    assert "objects that are not plain tensors" not in str(refused.value)


@pytest.mark.parametrize(("change", "said"), [
    (lambda group, state: group.update(betas=(5.0, 0.999)), "Adam refuses these hyperparameters"),
    (lambda group, state: group.update(eps=0.0 - 1e-3), "negative"),
    (lambda group, state: next(iter(state.values())).update(step=torch.tensor(-3.0)), "not a count of steps"),
])
def test_optimizer_values_torch_refuses_are_refused_before_anything_loads(tmp_path: Path, change, said) -> None:
    class AdamModule(TinyClassifier):
        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    path, _ = train_full(tmp_path / "a", module=AdamModule())
    checkpoint = torch.load(path, weights_only=True)
    state = checkpoint["optimizer_states"][0]
    change(state["param_groups"][0], state["state"])
    bad = tmp_path / "bad.ckpt"
    torch.save(checkpoint, bad)
    module = AdamModule()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    with pytest.raises(CheckpointError, match=said) as refused:
        quiet_trainer(tmp_path / "b", max_steps=4).fit(module, tiny_loaders(n=64)[0], ckpt_path=bad)
    assert "nothing was loaded" in str(refused.value)
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())
