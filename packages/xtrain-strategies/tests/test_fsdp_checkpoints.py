"""FSDP trains like DDP, and its checkpoints move between strategies and world sizes (real gloo processes).

Each source run trains two epochs of the same unshuffled data (one global batch = 16 samples at any world size)
with AdamW and gradient clipping, keeping the checkpoint written at the end of epoch 0. Each portability test resumes
that checkpoint under another strategy or world size and checks the next losses (steps 5-8) and the final weights
against the uninterrupted run. Tolerance: 1e-6 absolute for float32 (measured differences are below 1e-7; they come
only from the order of the gradient reductions).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from fsdp_helpers import max_difference, train, weights
from xtrain.core.errors import CheckpointError
from xtrain.core.sharded_checkpoint import MANIFEST_FILE, read_sharded_checkpoint

XTRAIN = str(Path(sys.executable).with_name("xtrain"))  # the console script installed with xtrain-core
TOL = 1e-6
EPOCH0 = "epoch=0-step=4.ckpt"
CHECKPOINTS = {"every_n_epochs": 1, "save_last": True, "save_top_k": -1}


def _source(root: Path, name: str, **settings: Any) -> dict[str, Any]:
    out = root / name
    records = train(out, clip=0.5, checkpoint={**CHECKPOINTS, "dirpath": str(out / "ck")}, **settings)
    return {"records": records, "ck": out / "ck"}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The runs every test below resumes from or compares with (trained once per module)."""
    root = tmp_path_factory.mktemp("fsdp_sources")
    return {
        # Sharded and written in the background; a unit per Linear layer.
        "fsdp2": _source(root, "fsdp2", strategy="fsdp", devices=2,
                         options={"auto_wrap_policy": ["Linear"], "async_save": True}),
        "fsdp1": _source(root, "fsdp1", strategy="fsdp", devices=1, batch_size=16),
        "ddp2": _source(root, "ddp2", strategy="ddp", devices=2),
        "fsdp2_full": _source(root, "fsdp2_full", strategy="fsdp", devices=2,
                              options={"state_dict_type": "full", "min_num_params": 500}),
    }


def _resume(tmp_path: Path, source: dict[str, Any], **settings: Any) -> dict[str, Any]:
    records = train(tmp_path / "resumed", clip=0.5, ckpt_path=str(source["ck"] / EPOCH0), **settings)
    return records[0]


def _assert_continues(resumed: dict[str, Any], reference: dict[str, Any]) -> None:
    assert resumed["global_step"] == reference["global_step"] == 8
    assert len(resumed["losses"]) == 4, "the resumed run did not start after the checkpoint's step"
    losses = torch.tensor(resumed["losses"]) - torch.tensor(reference["losses"][4:])
    assert losses.abs().max() <= TOL, f"next losses differ: {resumed['losses']} vs {reference['losses'][4:]}"
    assert max_difference(weights(resumed), weights(reference)) <= TOL


def test_fsdp_matches_ddp_on_the_same_data(sources: dict[str, dict[str, Any]]) -> None:
    fsdp, ddp = sources["fsdp2"]["records"], sources["ddp2"]["records"]
    assert fsdp[0]["strategy"] == "FSDPStrategy" and fsdp[0]["param_types"] == ["DTensor"]
    assert ddp[0]["strategy"] == "DDPStrategy"
    assert torch.tensor(fsdp[0]["losses"][-1]) < torch.tensor(fsdp[0]["losses"][0]) / 2
    assert (torch.tensor(fsdp[0]["losses"]) - torch.tensor(ddp[0]["losses"])).abs().max() <= TOL
    assert max_difference(weights(fsdp[0]), weights(ddp[0])) <= TOL
    assert max_difference(weights(fsdp[0]), weights(fsdp[1])) == 0.0, "ranks gathered different weights"
    # One process of the global batch trains the same model too (world size 1 is a real FSDP run).
    assert max_difference(weights(sources["fsdp1"]["records"][0]), weights(ddp[0])) <= TOL


def test_sharded_checkpoints_are_directories_with_the_manifest(sources: dict[str, dict[str, Any]]) -> None:
    ck = sources["fsdp2"]["ck"]
    assert sorted(p.name for p in ck.iterdir()) == [EPOCH0, "epoch=1-step=8.ckpt", "last.ckpt"]
    for path in ck.iterdir():
        manifest = json.loads((path / MANIFEST_FILE).read_text())
        assert manifest["xtrain"]["layout"] == "sharded" and manifest["xtrain"]["world_size"] == 2
        assert manifest["xtrain"]["strategy"] == "fsdp"
        shards = sorted(p.name for p in (path / manifest["data"]).iterdir())
        assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp", "rest.pt"], "every rank writes its shard"
        assert [p.name for p in path.iterdir() if p.name.startswith("shards-")] == [manifest["data"]]
    # last.ckpt is a copy (hard links) of the newest one, written once the background save had finished.
    last = read_sharded_checkpoint(ck / "last.ckpt")
    newest = read_sharded_checkpoint(ck / "epoch=1-step=8.ckpt")
    assert last["loops"] == newest["loops"] and last["loops"]["global_step"] == 8
    for key, value in newest["state_dict"].items():
        assert torch.equal(last["state_dict"][key], value)
    full = sources["fsdp2_full"]["ck"] / EPOCH0
    assert full.is_file()
    loaded = torch.load(full, weights_only=True)
    assert loaded["xtrain"]["layout"] == "full" and loaded["xtrain"]["world_size"] == 2


def test_fsdp2_to_fsdp1(tmp_path: Path, sources: dict[str, dict[str, Any]]) -> None:
    resumed = _resume(tmp_path, sources["fsdp2"], strategy="fsdp", devices=1, batch_size=16)
    assert resumed["strategy"] == "FSDPStrategy" and resumed["world_size"] == 1
    _assert_continues(resumed, sources["fsdp2"]["records"][0])


def test_fsdp1_to_fsdp2(tmp_path: Path, sources: dict[str, dict[str, Any]]) -> None:
    resumed = _resume(tmp_path, sources["fsdp1"], strategy="fsdp", devices=2)
    _assert_continues(resumed, sources["fsdp1"]["records"][0])


def test_fsdp2_to_single_device(tmp_path: Path, sources: dict[str, dict[str, Any]]) -> None:
    resumed = _resume(tmp_path, sources["fsdp2"], devices=1, batch_size=16)
    assert resumed["strategy"] == "SingleDeviceStrategy"
    _assert_continues(resumed, sources["fsdp2"]["records"][0])


def test_ddp2_to_fsdp2(tmp_path: Path, sources: dict[str, dict[str, Any]]) -> None:
    resumed = _resume(tmp_path, sources["ddp2"], strategy="fsdp", devices=2)
    _assert_continues(resumed, sources["ddp2"]["records"][0])


def test_full_file_to_sharded_fsdp2(tmp_path: Path, sources: dict[str, dict[str, Any]]) -> None:
    resumed = _resume(tmp_path, sources["fsdp2_full"], strategy="fsdp", devices=2,
                      options={"auto_wrap_policy": ["Linear"]})
    _assert_continues(resumed, sources["fsdp2_full"]["records"][0])


def test_consolidate_command_writes_one_plain_file(tmp_path: Path, sources: dict[str, dict[str, Any]]) -> None:
    src, dst = sources["fsdp2"]["ck"] / EPOCH0, tmp_path / "consolidated.ckpt"
    done = subprocess.run([XTRAIN, "checkpoint", "consolidate", str(src), str(dst)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert str(dst) in done.stdout
    plain = torch.load(dst, weights_only=True)
    assert plain["xtrain"]["layout"] == "full" and plain["xtrain"]["world_size"] == 2
    assert plain["xtrain"]["strategy"] == "fsdp"
    ddp_epoch0 = torch.load(sources["ddp2"]["ck"] / EPOCH0, weights_only=True)
    assert plain.keys() == ddp_epoch0.keys()
    assert plain["loops"] == ddp_epoch0["loops"]
    for key, value in ddp_epoch0["state_dict"].items():
        assert (plain["state_dict"][key] - value).abs().max() <= TOL
    exp_avg = plain["optimizer_states"][0]["state"]["net.0.weight"]["exp_avg"]
    assert exp_avg.shape == (32, 16), "optimizer state was not gathered whole"
    refused = subprocess.run([XTRAIN, "checkpoint", "consolidate", str(tmp_path / "missing"), str(tmp_path / "x.ckpt")],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "does not exist" in refused.stderr


def test_a_directory_without_its_manifest_is_refused(tmp_path: Path, sources: dict[str, dict[str, Any]]) -> None:
    import shutil

    broken = tmp_path / "epoch=5-step=99.ckpt"
    shutil.copytree(sources["fsdp2"]["ck"] / EPOCH0, broken)
    (broken / MANIFEST_FILE).unlink()
    with pytest.raises(CheckpointError, match="incomplete"):
        read_sharded_checkpoint(broken)


def test_top_k_pruning_last_and_resume_from_last_with_directories(tmp_path: Path,
                                                                   sources: dict[str, dict[str, Any]]) -> None:
    """Every step saves in the background; older directories are pruned, last.ckpt follows, ckpt_path="last" works."""
    ck = tmp_path / "ck"
    options = {"auto_wrap_policy": ["Linear"], "async_save": True}
    train(tmp_path / "first", strategy="fsdp", devices=2, epochs=1, clip=0.5, options=options,
          checkpoint={"dirpath": str(ck), "every_n_train_steps": 1, "save_top_k": 2, "save_last": True})
    assert sorted(p.name for p in ck.iterdir()) == ["epoch=0-step=3.ckpt", "epoch=0-step=4.ckpt", "last.ckpt"]
    last = read_sharded_checkpoint(ck / "last.ckpt")
    assert last["loops"]["global_step"] == 4
    assert last["xtrain"]["layout"] == "sharded" and last["xtrain"]["world_size"] == 2
    resumed = train(tmp_path / "second", strategy="fsdp", devices=2, clip=0.5, options=options, ckpt_path="last",
                    checkpoint={"dirpath": str(ck), "save_last": True})
    _assert_continues(resumed[0], sources["fsdp2"]["records"][0])


def test_a_save_replaces_what_a_killed_save_left_under_its_name(tmp_path: Path) -> None:
    """A sharded save killed before its manifest leaves a directory nothing can load; when the resumed run saves
    that step again, the save takes the name and removes the leftover data (it went to ``-v1`` beside it, and the
    leftover stayed forever: found by an outside trial that killed FSDP jobs at random)."""
    ck = tmp_path / "ck"
    leftover = ck / EPOCH0 / "shards-0123456789ab"
    leftover.mkdir(parents=True)
    (leftover / "rest.pt").write_bytes(b"the first half of a file")
    train(tmp_path / "run", strategy="fsdp", devices=1, batch_size=16, epochs=1, clip=0.5,
          checkpoint={"dirpath": str(ck), "every_n_epochs": 1, "save_top_k": -1})
    assert sorted(p.name for p in ck.iterdir()) == [EPOCH0]
    assert read_sharded_checkpoint(ck / EPOCH0)["loops"]["global_step"] == 4
    assert not leftover.exists()
