"""Hostile files from the second outside trial: each loaded silently, took minutes, or escaped as a raw error.

Bytes appended after a sealed file moved its seal out of sight and turned verification off; a seal stripped from
a file whose manifest says it was sealed did the same; a checksum list naming a huge sparse file was read whole
before its size was compared; a tensor declared with dozens of size-1 dims made the tiling check double its work
with every dim (and fail an allocation as a raw RuntimeError, which ``ckpt_path="auto"`` does not skip).
"""

from __future__ import annotations

import struct
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.utils.serialization
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)

from checkpoint_helpers import data_dir, manifest, metadata, rehash, write_manifest_file
from xtrain.core import CheckpointError
from xtrain.core._internal import integrity
from xtrain.core._internal.auto_resume import newest_complete
from xtrain.core._internal.checkpoint_gate import inspect_checkpoint
from xtrain.core._internal.chunk_layout import MAX_SPLIT_DIMS, tiling_problem
from xtrain.core.checkpoint_reader import read_checkpoint
from xtrain.core.defaults.torch_io import save_file


def _flip_tensor_byte(raw: bytes, path: Path) -> bytes:
    """``raw`` (the bytes of ``path``) with one bit flipped inside the first tensor storage record's data."""
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if "/data/" in i.filename and i.file_size >= 16)
    names, extra = struct.unpack_from("<HH", raw, info.header_offset + 26)
    at = info.header_offset + 30 + names + extra + 5
    return raw[:at] + bytes([raw[at] ^ 0x40]) + raw[at + 1:]


def _refused(path: Path, *needles: str) -> str:
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path)
    for needle in (str(path), *needles):
        assert needle in str(info.value)
    return str(info.value)


# -- 1. appended bytes, stripped seals ------------------------------------------------------------------------------
@pytest.mark.parametrize("appended", [100, 4096, 65_000, 200_000])
def test_bytes_appended_after_a_sealed_file_are_refused(appended: int, genuine: tuple[Path, Path],
                                                        tmp_path: Path) -> None:
    raw = genuine[0].read_bytes()
    path = tmp_path / "appended.ckpt"
    for body in (raw, _flip_tensor_byte(raw, genuine[0])):
        path.write_bytes(body + bytes(appended))
        _refused(path)


def test_bytes_appended_to_a_plain_torch_file_are_refused_and_plain_files_still_load(tmp_path: Path) -> None:
    path, state = tmp_path / "plain.pt", {"w": torch.randn(64, 8)}
    options: Any = torch.utils.serialization.config.save
    for legacy, crc in ((False, True), (False, False), (True, True)):  # torch's own files: all load as before
        before, options.compute_crc32 = options.compute_crc32, crc
        try:
            torch.save(state, path, _use_new_zipfile_serialization=not legacy)
        finally:
            options.compute_crc32 = before
        assert torch.equal(read_checkpoint(path)["w"], state["w"])
    torch.save(state, path)
    path.write_bytes(path.read_bytes() + bytes(100))
    _refused(path, "followed by bytes")


def test_a_stripped_seal_is_refused_when_the_manifest_says_the_file_was_sealed(genuine: tuple[Path, Path],
                                                                             tmp_path: Path) -> None:
    raw = genuine[0].read_bytes()
    assert raw[-21:].startswith(b"xtrain-crc32:")
    unsealed = raw[:-23] + b"\x00\x00"  # the archive as torch wrote it: no comment, every record CRC 0
    path = tmp_path / "unsealed.ckpt"
    for body in (unsealed, _flip_tensor_byte(unsealed, genuine[0])):
        path.write_bytes(body)
        _refused(path, "sealed with a CRC-32", "carries none")
        assert read_checkpoint(path, verify=False)["state_dict"]  # unverified on request, as documented


def test_a_file_saved_with_checksums_off_still_loads_verified(genuine: tuple[Path, Path], tmp_path: Path) -> None:
    checkpoint = torch.load(genuine[0], weights_only=True)
    checkpoint["xtrain"] = dict(checkpoint["xtrain"], checksums="none")  # what TorchCheckpointIO(checksums=False) writes
    save_file(checkpoint, tmp_path / "off.ckpt", checksums=False)
    assert read_checkpoint(tmp_path / "off.ckpt")["xtrain"]["checksums"] == "none"


# -- 2. a checksum list naming a huge file -----------------------------------------------------------------------------
def test_a_listed_file_of_the_wrong_size_is_refused_without_reading_it(sharded: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    with (data_dir(sharded) / "big.bin").open("wb") as f:
        f.truncate(16 << 30)  # sparse: no disk used, 16 GiB to read
    content = manifest(sharded)
    content["xtrain"]["checksums"]["files"]["big.bin"] = [0, 10]
    write_manifest_file(sharded, content)
    read = integrity.file_checksum

    def spy(path: Path) -> tuple[int, int]:
        assert path.name != "big.bin", "the whole file was read before its size was compared"
        return read(path)

    monkeypatch.setattr(integrity, "file_checksum", spy)
    start = time.perf_counter()
    message = _refused(sharded, "big.bin", "size 17179869184 vs 10 bytes")
    assert time.perf_counter() - start < 5 and "Resume from an earlier checkpoint" in message


# -- 3. tensors of many dims ---------------------------------------------------------------------------------------
def _plant(path: Path, ndim: int, boxes: list[tuple[tuple[int, int], tuple[int, int]]]) -> None:
    """Declare the tensor ``evil`` of shape [2, 2, 1, ...] (``ndim`` dims) in ``boxes`` (offsets and sizes of the
    first two dims), each chunk stored at 16 bytes of its own in a listed, checksummed file."""
    meta = metadata(path)
    chunks = []
    for i, ((a, b), (n, m)) in enumerate(boxes):
        offsets = torch.Size([a, b] + [0] * (ndim - 2))
        chunks.append(ChunkStorageMetadata(offsets=offsets, sizes=torch.Size([n, m] + [1] * (ndim - 2))))
        meta.storage_data[MetadataIndex("evil", offsets)] = _StorageInfo("extra.bin", 16 * i, 16)
    meta.state_dict_metadata["evil"] = TensorStorageMetadata(TensorProperties(dtype=torch.float32),
                                                             torch.Size([2, 2] + [1] * (ndim - 2)), chunks)
    import pickle

    (data_dir(path) / ".metadata").write_bytes(pickle.dumps(meta))
    (data_dir(path) / "extra.bin").write_bytes(bytes(16 * len(boxes)))
    content = manifest(path)
    content["xtrain"]["checksums"]["files"]["extra.bin"] = [0, 0]
    write_manifest_file(path, content)
    rehash(path)


TILES = [((0, 0), (1, 1)), ((0, 1), (1, 1)), ((1, 0), (1, 1)), ((1, 1), (1, 1))]
OVERLAPS = [((0, 0), (2, 1)), ((1, 0), (1, 1)), ((0, 1), (1, 1))]  # (1, 0) held twice, (1, 1) never


@pytest.mark.parametrize("ndim", [20, 40])
def test_size_one_dims_cost_nothing_in_the_tiling_check(ndim: int, sharded: Path) -> None:
    _plant(sharded, ndim, TILES)
    start = time.perf_counter()
    assert read_checkpoint(sharded)["state_dict"]
    assert time.perf_counter() - start < 5


def test_an_overlap_in_a_tensor_of_many_dims_is_refused_and_auto_skips_it(sharded: Path) -> None:
    _plant(sharded, 40, OVERLAPS)
    message = _refused(sharded, "'evil'", "overlap: 2 chunks hold the element at [1, 0, 0,")
    assert "Resume from an earlier checkpoint" in message
    with pytest.raises(CheckpointError, match="overlap"):
        inspect_checkpoint(sharded)
    assert newest_complete([sharded]) is None


def test_tiling_check_is_exact_on_split_dims_and_bounded_beyond_them() -> None:
    boxes = [((0, 0, 0), (2, 1, 2)), ((0, 0, 2), (2, 1, 2)), ((2, 0, 0), (2, 1, 2)), ((1, 0, 2), (2, 1, 2))]
    assert tiling_problem((4, 1, 4), boxes) == "overlap: 2 chunks hold the element at [1, 0, 2], so others are never read"
    boxes[3] = ((2, 0, 2), (2, 1, 2))
    assert tiling_problem((4, 1, 4), boxes) is None
    ndim = MAX_SPLIT_DIMS + 1
    ones = [(tuple((i >> d) & 1 for d in range(ndim)), (1,) * ndim) for i in range(2 ** ndim)]
    problem = tiling_problem((2,) * ndim, ones)
    assert problem is not None and f"split along {ndim} of its dims" in problem
    start = time.perf_counter()
    assert tiling_problem((2,) * MAX_SPLIT_DIMS + (1,) * 50, [(o[:-1] + (0,) * 50, (1,) * (MAX_SPLIT_DIMS + 50))
                                                              for o, _ in ones[:2 ** MAX_SPLIT_DIMS]]) is None
    assert time.perf_counter() - start < 2


@pytest.mark.parametrize("error", [RuntimeError("can't allocate memory"), MemoryError()])
def test_an_allocation_failure_while_checking_metadata_is_a_checkpoint_error(error: BaseException, sharded: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any) -> None:
        raise error

    monkeypatch.setattr("xtrain.core._internal.safe_metadata.tiling_problem", fail)
    with pytest.raises(CheckpointError, match=type(error).__name__) as info:
        inspect_checkpoint(sharded)
    assert str(sharded) in str(info.value)
    _refused(sharded, type(error).__name__)
    assert newest_complete([sharded]) is None


# -- 5. files the operating system will not let us read ------------------------------------------------------------
@pytest.mark.parametrize("verify", [True, False])
@pytest.mark.parametrize("name", [".metadata", "xtrain.json"])
def test_a_file_that_cannot_be_read_is_called_unreadable_not_corrupted(name: str, verify: bool, sharded: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests run as root, whom file modes do not stop: the read itself is made to fail as it does for a user
    without permission. Calling the file corrupted would send the user to an earlier checkpoint for nothing."""
    import errno

    target = next(p for p in sharded.rglob(name))
    real_read, real_open = Path.read_bytes, Path.open

    def read_bytes(self: Path) -> bytes:
        if self == target:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_read(self)

    def path_open(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == target:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    monkeypatch.setattr(Path, "open", path_open)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(sharded, verify=verify)
    message = str(info.value)
    assert "cannot be read (PermissionError" in message and "Check the permissions" in message, message
    assert "corrupted" not in message and "crafted" not in message, message
