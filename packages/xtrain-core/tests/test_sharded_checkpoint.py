"""Sharded checkpoint directories in one process: format, atomic overwrite, copies, refusal, conversion.

Multi-rank writing and resharding across world sizes are tested with real processes in xtrain-strategies
(``test_fsdp_checkpoints.py``); here one process writes through the same :class:`ShardedSaver`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import CheckpointError, Engine, ModelCheckpoint, Trainer
from xtrain.core._internal.checkpointing import find_checkpoint
from xtrain.core.sharded_checkpoint import (
    MANIFEST_FILE,
    checkpoint_complete,
    consolidate,
    copy_sharded_checkpoint,
    join_tensors,
    read_sharded_checkpoint,
    split_tensors,
)
from xtrain.core.sharded_saver import ShardedSaver
from xtrain.core.strategy import Strategy


@pytest.fixture
def strategy() -> Strategy:
    engine = Engine(accelerator="cpu", devices=1)
    engine.launch()
    return engine.strategy


def _checkpoint(value: float) -> dict[str, Any]:
    return {"xtrain": {"format_version": 1, "strategy": "test", "world_size": 1, "layout": "sharded"},
            "state_dict": {"a.weight": torch.full((3, 2), value), "a.bias": torch.zeros(3)},
            "optimizer_states": [{"state": {"a.weight": {"step": torch.tensor(value), "exp_avg": torch.ones(3, 2)}},
                                  "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99), "params": ["a.weight"]}]}],
            "rng": [{"torch": torch.arange(4, dtype=torch.uint8), "python": [3, [1, 2], None]}],
            "loops": {"global_step": int(value), "name": "x"}}


def test_split_and_join_round_trip_nested_tensors() -> None:
    checkpoint = _checkpoint(2.0)
    tensors, rest = split_tensors(checkpoint)
    assert "optimizer_states.0.state.a.weight.exp_avg" in tensors and "rng.0.torch" in tensors
    assert not split_tensors(rest)[0], "the rest still holds tensors"
    joined = join_tensors(rest, tensors)
    assert joined["optimizer_states"][0]["param_groups"][0]["betas"] == (0.9, 0.99)
    assert torch.equal(joined["state_dict"]["a.weight"], checkpoint["state_dict"]["a.weight"])


def test_save_and_read_back_with_the_manifest_last(tmp_path: Path, strategy: Strategy) -> None:
    path = tmp_path / "a.ckpt"
    ShardedSaver(strategy).save(_checkpoint(2.0), path)
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    assert manifest["xtrain"]["layout"] == "sharded" and (path / manifest["data"] / ".metadata").is_file()
    loaded = strategy.load_checkpoint(path)  # any strategy reads a directory: tensors whole, no process group
    assert torch.equal(loaded["state_dict"]["a.weight"], torch.full((3, 2), 2.0))
    assert loaded["optimizer_states"][0]["state"]["a.weight"]["step"] == 2.0
    assert loaded["rng"][0]["python"] == [3, [1, 2], None] and loaded["loops"] == {"global_step": 2, "name": "x"}
    target = {"state_dict": {"a.weight": torch.zeros(3, 2)}}
    read_sharded_checkpoint(path, template=target)
    assert torch.equal(target["state_dict"]["a.weight"], torch.full((3, 2), 2.0)), "template not filled in place"


def test_a_save_that_dies_before_its_commit_leaves_the_previous_checkpoint(tmp_path: Path, strategy: Strategy,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "last.ckpt"
    saver = ShardedSaver(strategy)
    saver.save(_checkpoint(1.0), path)

    def die(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # the process ends after every shard was written, before the manifest swap

    monkeypatch.setattr("xtrain.core.sharded_saver.write_manifest", die)
    with pytest.raises(KeyboardInterrupt):
        saver.save(_checkpoint(2.0), path)
    assert len([p for p in path.iterdir() if p.name.startswith("shards-")]) == 2
    assert torch.equal(read_sharded_checkpoint(path)["state_dict"]["a.weight"], torch.full((3, 2), 1.0))
    monkeypatch.undo()
    saver.save(_checkpoint(3.0), path)
    assert len([p for p in path.iterdir() if p.name.startswith("shards-")]) == 1, "stale data was not removed"
    assert read_sharded_checkpoint(path)["loops"]["global_step"] == 3


def test_async_save_snapshots_before_training_changes_the_tensors(tmp_path: Path, strategy: Strategy) -> None:
    saver = ShardedSaver(strategy, async_save=True)
    saver.setup()
    checkpoint = _checkpoint(1.0)
    saver.save(checkpoint, tmp_path / "a.ckpt")
    checkpoint["state_dict"]["a.weight"].fill_(7.0)  # training goes on in place
    saver.wait()
    assert checkpoint_complete(tmp_path / "a.ckpt")
    assert torch.equal(read_sharded_checkpoint(tmp_path / "a.ckpt")["state_dict"]["a.weight"], torch.ones(3, 2))


def test_copies_are_independent_and_layouts_can_replace_each_other(tmp_path: Path, strategy: Strategy) -> None:
    saver = ShardedSaver(strategy)
    saver.save(_checkpoint(1.0), tmp_path / "a.ckpt")
    strategy.copy_checkpoint(tmp_path / "a.ckpt", tmp_path / "last.ckpt")
    saver.save(_checkpoint(2.0), tmp_path / "a.ckpt")
    strategy.remove_checkpoint(tmp_path / "a.ckpt")
    assert not (tmp_path / "a.ckpt").exists()
    assert read_sharded_checkpoint(tmp_path / "last.ckpt")["loops"]["global_step"] == 1
    # A strategy writing files takes over a directory's name, and the other way round (resuming elsewhere).
    strategy.save_checkpoint({"x": torch.ones(1)}, tmp_path / "last.ckpt")
    strategy.checkpoint_io.settle()  # the file is renamed onto its path in the background
    assert (tmp_path / "last.ckpt").is_file()
    saver.save(_checkpoint(3.0), tmp_path / "b.ckpt")
    copy_sharded_checkpoint(tmp_path / "b.ckpt", tmp_path / "last.ckpt")
    assert read_sharded_checkpoint(tmp_path / "last.ckpt")["loops"]["global_step"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.ckpt", "last.ckpt"]


def test_incomplete_or_damaged_directories_are_clear_errors(tmp_path: Path, strategy: Strategy) -> None:
    path = tmp_path / "a.ckpt"
    ShardedSaver(strategy).save(_checkpoint(1.0), path)
    data = path / json.loads((path / MANIFEST_FILE).read_text())["data"]
    shard = next(data.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:10])
    with pytest.raises(CheckpointError, match="does not match the checksum"):
        read_sharded_checkpoint(path)
    with pytest.raises(CheckpointError, match="lies outside"):
        read_sharded_checkpoint(path, verify=False)
    (path / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupted"):
        read_sharded_checkpoint(path)
    (path / MANIFEST_FILE).unlink()
    assert not checkpoint_complete(path)
    with pytest.raises(CheckpointError, match="incomplete"):
        strategy.load_checkpoint(path)
    with pytest.raises(CheckpointError, match="does not exist"):
        read_sharded_checkpoint(tmp_path / "nothing")


def test_last_never_resolves_to_an_interrupted_directory(tmp_path: Path, strategy: Strategy) -> None:
    ck = tmp_path / "ck"
    trainer = Trainer(accelerator="cpu", devices=1, default_root_dir=tmp_path, logger=False,
                      callbacks=[ModelCheckpoint(dirpath=ck, save_last=True)])
    ShardedSaver(strategy).save(_checkpoint(1.0), ck / "last-v1.ckpt")
    (ck / "last.ckpt").mkdir()  # a first save to last.ckpt that was killed before its manifest
    os.utime(ck / "last-v1.ckpt", (0, 0))
    assert find_checkpoint(trainer, "last") == str(ck / "last-v1.ckpt")
    (ck / "last-v1.ckpt" / MANIFEST_FILE).unlink()
    with pytest.warns(UserWarning, match="no complete last"):
        assert find_checkpoint(trainer, "last") is None


def test_consolidate_writes_a_plain_torch_file(tmp_path: Path, strategy: Strategy) -> None:
    ShardedSaver(strategy).save(_checkpoint(4.0), tmp_path / "a.ckpt")
    consolidate(tmp_path / "a.ckpt", tmp_path / "one.ckpt")
    plain = torch.load(tmp_path / "one.ckpt", weights_only=True)
    assert plain["xtrain"]["layout"] == "full" and plain["xtrain"]["strategy"] == "test"
    assert torch.equal(plain["state_dict"]["a.weight"], torch.full((3, 2), 4.0))
    assert plain["optimizer_states"][0]["param_groups"][0]["params"] == ["a.weight"]


def test_load_from_checkpoint_of_a_directory_names_a_command_that_works(tmp_path: Path, strategy: Strategy) -> None:
    """The suggested command wrote the file onto its own source (``x.ckpt`` -> ``x.ckpt``) and failed."""
    import shlex

    from xtrain.core.testing import TinyClassifier

    ShardedSaver(strategy).save(_checkpoint(4.0), tmp_path / "epoch=1-step=16.ckpt")
    with pytest.raises(CheckpointError, match="xtrain checkpoint consolidate") as caught:
        TinyClassifier.load_from_checkpoint(tmp_path / "epoch=1-step=16.ckpt")
    command = str(caught.value).split("Run: ")[1].split(", then")[0]
    source, target = shlex.split(command)[3:]
    assert source == str(tmp_path / "epoch=1-step=16.ckpt") and target == str(tmp_path / "epoch=1-step=16.full.ckpt")
    consolidate(Path(source), Path(target))
    assert torch.load(target, weights_only=True)["xtrain"]["layout"] == "full"
