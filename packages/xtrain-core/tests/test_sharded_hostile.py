"""Sharded checkpoints whose chunk table lies: every element must be read exactly once, from bytes of its own.

DCP's metadata says, per tensor, which N-D boxes (chunks) of it are stored and at which bytes of which file. A crafted
table can make chunks overlap (so other elements are never read), claim a tensor far larger than its bytes (a sparse
file has any size for free), or point many chunks at the same bytes (a small file fills any number of tensors).
Each case stores real chunk bytes, listed and checksummed like the saver's own files, so only the chunk checks stand
between the table and the load.
"""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)

from checkpoint_helpers import (
    data_dir,
    manifest,
    metadata,
    quiet_trainer,
    rehash,
    write_manifest_file,
)
from xtrain.core import CheckpointError
from xtrain.core._internal.auto_resume import newest_complete
from xtrain.core._internal.checkpoint_gate import inspect_checkpoint
from xtrain.core.checkpoint_reader import read_checkpoint
from xtrain.core.sharded_checkpoint import split_tensors
from xtrain.core.testing import TinyClassifier, tiny_loaders

Box = tuple[Sequence[int], Sequence[int]]
WEIGHT = "state_dict.net.0.weight"  # shape [32, 16]


def _save_metadata(path: Path, meta: Any, *, new_file: str | None = None) -> None:
    """Write DCP metadata back and re-seal the checksums (listing ``new_file`` too), so only the table is wrong."""
    (data_dir(path) / ".metadata").write_bytes(pickle.dumps(meta))
    if new_file is not None:
        content = manifest(path)
        content["xtrain"]["checksums"]["files"][new_file] = [0, 0]
        write_manifest_file(path, content)
    rehash(path)


def _store_chunks(path: Path, key: str, whole: torch.Tensor, boxes: list[Box]) -> str:
    """Store ``key`` as DCP stores a tensor split over ranks: each box (offsets, sizes) of ``whole`` saved on its own,
    at bytes of its own, in a new shard file; returns the file's name."""
    meta = metadata(path)
    name = f"__{len(list(data_dir(path).glob('*.distcp'))) + 7}_0.distcp"
    for index in [i for i in meta.storage_data if i.fqn == key]:
        del meta.storage_data[index]
    blob, chunks = io.BytesIO(), []
    for offsets, sizes in boxes:
        start = blob.tell()
        torch.save(whole[tuple(slice(o, o + n) for o, n in zip(offsets, sizes, strict=True))].clone(), blob)
        meta.storage_data[MetadataIndex(key, torch.Size(offsets))] = _StorageInfo(name, start, blob.tell() - start)
        chunks.append(ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes)))
    meta.state_dict_metadata[key] = TensorStorageMetadata(TensorProperties(dtype=whole.dtype), whole.shape, chunks)
    (data_dir(path) / name).write_bytes(blob.getvalue())
    _save_metadata(path, meta, new_file=name)
    return name


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["state_dict"]  # type: ignore[no-any-return]


def _refused(path: Path, *needles: str) -> str:
    """The refusal of ``path`` by read_checkpoint (checksums verified or not), which names what it must."""
    for verify in (True, False):
        with pytest.raises(CheckpointError) as info:
            read_checkpoint(path, verify=verify)
        for needle in (str(path), *needles):
            assert needle in str(info.value)
    return str(info.value)


def _fit_leaves_model_alone(path: Path, root: Path) -> None:
    module = TinyClassifier()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    with pytest.raises(CheckpointError):
        quiet_trainer(root).fit(module, tiny_loaders(n=32)[0], ckpt_path=path)
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items()), "a weight of the file was loaded"


@pytest.mark.parametrize("boxes", [
    [((0, 0), (16, 16)), ((8, 0), (16, 16))],  # volumes add up to 512, rows 24..31 never read
    [((0, 0), (16, 8)), ((0, 8), (16, 8)), ((16, 0), (16, 8)), ((8, 8), (16, 8))],  # TP x FSDP grid, one box moved
], ids=["rows", "tp-x-fsdp"])
def test_overlapping_chunks_are_refused(boxes: list[Box], genuine: tuple[Path, Path], sharded: Path,
                                        tmp_path: Path) -> None:
    _store_chunks(sharded, WEIGHT, _weights(genuine[0])["net.0.weight"], boxes)
    message = _refused(sharded, repr(WEIGHT), "overlap")
    assert "Resume from an earlier checkpoint" in message
    _fit_leaves_model_alone(sharded, tmp_path / "fit")


def _plant_sparse_tensor(path: Path, *, listed: bool) -> Path:
    """Make ``WEIGHT`` a 2 TiB tensor read from a sparse file (no disk used); ``listed``: checksums on, the file
    left out of their list (the attacker cannot checksum 2 TiB); else checksums off, as ``checksums=False`` writes."""
    big = data_dir(path) / "__1_0.distcp"
    with big.open("wb") as f:
        f.truncate(2**41 + 4096)
    meta = metadata(path)
    n = 2**39
    for index in [i for i in meta.storage_data if i.fqn == WEIGHT]:
        del meta.storage_data[index]
    meta.storage_data[MetadataIndex(WEIGHT, torch.Size([0]))] = _StorageInfo(big.name, 0, 2**41)
    meta.state_dict_metadata[WEIGHT] = TensorStorageMetadata(
        TensorProperties(dtype=torch.float32), torch.Size([n]), [ChunkStorageMetadata(torch.Size([0]),
                                                                                     torch.Size([n]))])
    _save_metadata(path, meta)
    if not listed:
        content = manifest(path)
        content["xtrain"]["checksums"] = "none"
        write_manifest_file(path, content)
    return big


@pytest.mark.parametrize("listed", [True, False], ids=["file-not-in-checksums", "checksums-off"])
def test_a_huge_tensor_in_a_sparse_file_is_refused(listed: bool, sharded: Path, tmp_path: Path) -> None:
    big = _plant_sparse_tensor(sharded, listed=listed)
    needles = (str(big), "checksum list does not name") if listed else (f"claims {2**41} bytes", "hostile")
    _refused(sharded, repr(WEIGHT), *needles)
    _fit_leaves_model_alone(sharded, tmp_path / "fit")


def test_auto_resume_skips_a_planted_sparse_checkpoint(genuine: tuple[Path, Path], sharded: Path) -> None:
    _plant_sparse_tensor(sharded, listed=True)
    assert newest_complete([sharded, genuine[0]], need="loops") == genuine[0]


def _share_bytes_between_tensors(path: Path) -> None:
    """Eight new tensors whose one chunk each reads the same bytes (the rest lists them as tensors to load)."""
    _store_chunks(path, "extra.t0", torch.arange(1024.0), [((0,), (1024,))])
    meta = metadata(path)
    for i in range(1, 8):
        meta.state_dict_metadata[f"extra.t{i}"] = copy.deepcopy(meta.state_dict_metadata["extra.t0"])
        meta.storage_data[MetadataIndex(f"extra.t{i}", torch.Size([0]))] = copy.deepcopy(
            meta.storage_data[MetadataIndex("extra.t0", torch.Size([0]))])
    _save_metadata(path, meta)
    rest_file = data_dir(path) / "rest.pt"
    rest = torch.load(rest_file, weights_only=True)
    rest["extra"] = split_tensors({"extra": {f"t{i}": torch.zeros(1) for i in range(8)}})[1]["extra"]
    torch.save(rest, rest_file)
    rehash(path)


def _share_bytes_within_a_tensor(path: Path, full: Path) -> None:
    """Both row halves of ``WEIGHT`` read from the bytes stored for the first: a valid tiling, duplicated data."""
    _store_chunks(path, WEIGHT, _weights(full)["net.0.weight"], [((0, 0), (16, 16)), ((16, 0), (16, 16))])
    meta = metadata(path)
    meta.storage_data[MetadataIndex(WEIGHT, torch.Size([16, 0]))] = copy.deepcopy(
        meta.storage_data[MetadataIndex(WEIGHT, torch.Size([0, 0]))])
    _save_metadata(path, meta)


@pytest.mark.parametrize("within", [False, True], ids=["tensors", "chunks-of-one-tensor"])
def test_chunks_sharing_bytes_are_refused_before_any_read(within: bool, genuine: tuple[Path, Path],
                                                           sharded: Path) -> None:
    if within:
        _share_bytes_within_a_tensor(sharded, genuine[0])
        needles: tuple[str, ...] = (f"two chunks of the tensor {WEIGHT!r}",)
    else:
        _share_bytes_between_tensors(sharded)
        needles = ("'extra.t0'", "'extra.t1'")
    _refused(sharded, *needles, "never shares bytes")
    with pytest.raises(CheckpointError, match="never shares bytes"):
        inspect_checkpoint(sharded)  # the check needs no tensor read: refused before any allocation


def test_a_multi_chunk_sharded_checkpoint_still_loads_bitwise(genuine: tuple[Path, Path], sharded: Path) -> None:
    weights = _weights(genuine[0])
    _store_chunks(sharded, WEIGHT, weights["net.0.weight"],  # TP (columns) x FSDP (uneven rows)
                  [((r, c), (n, 8)) for r, n in ((0, 5), (5, 11), (16, 16)) for c in (0, 8)])
    _store_chunks(sharded, "state_dict.net.3.weight", weights["net.3.weight"],  # FSDP with an empty last shard
                  [((0, 0), (3, 32)), ((3, 0), (1, 32)), ((4, 0), (0, 32))])
    _store_chunks(sharded, "state_dict.net.0.bias", weights["net.0.bias"], [((8 * i,), (8,)) for i in range(4)])
    for verify in (True, False):
        loaded = read_checkpoint(sharded, verify=verify)["state_dict"]
        assert set(loaded) == set(weights)
        for key, tensor in weights.items():
            assert torch.equal(loaded[key], tensor), key
