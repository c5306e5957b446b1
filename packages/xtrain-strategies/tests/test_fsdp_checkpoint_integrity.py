"""Sharded FSDP checkpoints written by two gloo ranks: hostile metadata never runs, a flipped byte in one rank's
shard file is caught, and a checkpoint that does not fit is refused on every rank with the shards unchanged."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

from fsdp_helpers import SCRIPTS, run_script, train
from xtrain.core._internal.integrity import file_checksum
from xtrain.core.sharded_checkpoint import MANIFEST_FILE

RESTORE = SCRIPTS / "fsdp_restore.py"


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fsdp_integrity")
    train(out / "run", strategy="fsdp", devices=2, epochs=1, checkpoint={"dirpath": str(out / "ck"),
                                                                        "save_last": True})
    return out / "ck" / "last.ckpt"


def _copy(sharded: Path, tmp_path: Path) -> tuple[Path, Path]:
    path = tmp_path / "ck" / "last.ckpt"
    shutil.copytree(sharded, path)
    return path, path / json.loads((path / MANIFEST_FILE).read_text())["data"]


def _rehash(path: Path, data: Path) -> None:
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    files = manifest["xtrain"]["checksums"]["files"]
    manifest["xtrain"]["checksums"]["files"] = {name: list(file_checksum(data / name)) for name in files}
    (path / MANIFEST_FILE).write_text(json.dumps(manifest))


def _restore(tmp_path: Path, ckpt: Path, classes: int = 4) -> tuple[str, list[dict[str, Any]]]:
    """The run's output, and the records of the ranks that reported before the launcher stopped the run."""
    out = tmp_path / "restore"
    out.mkdir()
    result = run_script(RESTORE, json.dumps({"out": str(out), "ckpt": str(ckpt), "classes": classes}), cwd=out,
                        check=False)
    assert result.returncodes != [0], "the refused restore did not fail the run"
    assert "CheckpointError" in result.output and str(ckpt) in result.output, result.output
    records = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    for record in records:
        assert record["error"].startswith("CheckpointError"), record["error"]
        assert record["unchanged"], "a refused restore changed the shards or the optimizer state"
    return result.output, records


class _Wrapped:
    def __init__(self, genuine: bytes, marker: Path) -> None:
        self.genuine, self.marker = genuine, marker

    def __reduce__(self) -> tuple[Any, ...]:
        code = f"__import__('os').system('touch {self.marker}') or __import__('pickle').loads({self.genuine!r})"
        return (eval, (code,))


def test_a_payload_in_the_metadata_of_a_two_rank_checkpoint_never_runs(sharded: Path, tmp_path: Path) -> None:
    path, data = _copy(sharded, tmp_path)
    marker = tmp_path / "pwned"
    meta = data / ".metadata"
    meta.write_bytes(pickle.dumps(_Wrapped(meta.read_bytes(), marker)))
    _rehash(path, data)
    output, _ = _restore(tmp_path, path)
    assert "refused unread" in output
    assert not marker.exists(), "the payload ran"


def test_a_flipped_byte_in_one_ranks_shard_file_is_caught(sharded: Path, tmp_path: Path) -> None:
    path, data = _copy(sharded, tmp_path)
    shard = data / "__1_0.distcp"
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0x04
    shard.write_bytes(bytes(raw))
    output, _ = _restore(tmp_path, path)
    assert str(shard) in output and "does not match the checksum" in output


def test_a_checkpoint_that_does_not_fit_leaves_every_ranks_shards_unchanged(sharded: Path, tmp_path: Path) -> None:
    output, _ = _restore(tmp_path, sharded, classes=6)
    assert "net.4.weight: checkpoint (4, 32) vs model (6, 32)" in output and "nothing was loaded" in output
