"""Reading ``torch.distributed.checkpoint``'s ``.metadata`` file without running code from it.

DCP stores its metadata as a pickle and reads it back with ``pickle.load``, which runs whatever a crafted file asks
for. Here it is read with an unpickler that resolves only the classes DCP's metadata consists of (its dataclasses,
``torch.Size``, dtypes, layouts, paths): anything else is refused before it is called. The result is then checked
field by field against the data directory: every file it names is a plain file inside that directory (no ``..``,
no symlink) listed in the manifest's checksum list when it has one, every byte range lies inside its file and shares
no byte with another, every chunk has at least its own bytes stored, and each tensor's chunks tile it exactly
(:mod:`~xtrain.core._internal.chunk_layout`). A read can then neither leave an element unwritten nor allocate more
than the files hold (a sparse file's size aside: the allocation failing is then reported by the reader).
"""

from __future__ import annotations

import io
import itertools
import math
import pickle
from collections.abc import Collection
from pathlib import Path
from typing import Any, ClassVar

import torch

from xtrain.core._internal.chunk_layout import tiling_problem
from xtrain.core._internal.read_errors import cannot_read
from xtrain.core.errors import CheckpointError

__all__ = ["check_metadata", "load_metadata"]

_DCP = "torch.distributed.checkpoint."
_ALLOWED: dict[str, set[str]] = {
    f"{_DCP}metadata": {"Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
                        "TensorProperties", "StorageMeta", "MetadataIndex", "_MEM_FORMAT_ENCODING"},
    f"{_DCP}filesystem": {"_StorageInfo"},
    "torch": {"Size"},
    "torch.serialization": {"_get_layout"},
    "pathlib": {"PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath", "Path"},
}
_MAX_METADATA = 256 * 2**20
_LOAD_BUILD: Any = vars(pickle._Unpickler)["load_build"]


class _Unpickler(pickle._Unpickler):
    """Resolves only :data:`_ALLOWED`, and fills in (``BUILD``) only instances of DCP's own classes: ``BUILD`` on a
    class object would ``setattr`` on the class for the whole process (``PosixPath.is_symlink = ...``)."""

    dispatch: ClassVar[dict[int, Any]] = dict(pickle._Unpickler.dispatch)

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if name in _ALLOWED.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of DCP's metadata")

    def _load_build(self) -> None:
        target = vars(self)["stack"][-2]  # the Python unpickler's stack: under the state BUILD applies
        module = type(target).__module__
        if isinstance(target, type) or not module.startswith(_DCP) or \
                type(target).__name__ not in _ALLOWED.get(module, ()):
            raise pickle.UnpicklingError(f"the pickle sets the state of a {type(target).__name__}, not of an "
                                         f"instance of DCP's metadata classes")
        _LOAD_BUILD(self)

    dispatch[pickle.BUILD[0]] = _load_build


def load_metadata(file: Path, *, checkpoint: str) -> Any:
    """Unpickle ``file`` with the allowlist, or raise :class:`CheckpointError` naming it."""
    from torch.distributed.checkpoint.metadata import Metadata

    if not file.is_file() or file.is_symlink():
        raise CheckpointError(f"checkpoint {checkpoint!r}: the tensor metadata {str(file)!r} is missing or not a "
                              f"plain file. Resume from an earlier checkpoint.")
    if file.stat().st_size > _MAX_METADATA:
        raise CheckpointError(f"checkpoint {checkpoint!r}: the tensor metadata {str(file)!r} is "
                              f"{file.stat().st_size} bytes, more than any real one; refused unread.")
    try:
        raw = file.read_bytes()
    except OSError as err:
        raise cannot_read(f"checkpoint {checkpoint!r}: the tensor metadata {str(file)!r}", err) from None
    try:
        metadata = _Unpickler(io.BytesIO(raw)).load()
    except Exception as err:  # noqa: BLE001 - whatever a crafted or damaged pickle raises, the answer is the same
        raise CheckpointError(f"checkpoint {checkpoint!r}: the tensor metadata {str(file)!r} was refused unread and "
                              f"nothing in it was executed ({type(err).__name__}: {err}). It is corrupted or was "
                              f"crafted; resume from an earlier checkpoint.") from None
    if not isinstance(metadata, Metadata):
        raise CheckpointError(f"checkpoint {checkpoint!r}: {str(file)!r} holds a {type(metadata).__name__}, not "
                              f"DCP metadata.")
    return metadata


def check_metadata(metadata: Any, data: Path, *, checkpoint: str, listed: Collection[str] | None = None) -> None:
    """Check every field a read will use against the files in ``data``; raise :class:`CheckpointError` if any is off.

    Args:
        metadata: DCP's metadata, as :func:`load_metadata` read it.
        data: The data directory it describes.
        checkpoint: The checkpoint's path, for messages.
        listed: The files the manifest's checksum list names, if it has one: a file outside it was not written with
            the checkpoint, so the metadata may not read from it (its size, e.g. of a sparse file, bounds nothing).
    """
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata

    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {checkpoint!r}: the tensor metadata in {str(data / '.metadata')!r} is "
                               f"invalid ({what}); refused. Resume from an earlier checkpoint.")

    storage = metadata.storage_data
    if not isinstance(metadata.state_dict_metadata, dict) or not isinstance(storage, dict):
        raise bad("its tables are not dicts")
    sizes: dict[str, int] = {}
    ranges: list[tuple[str, int, int, str]] = []
    for index, info in storage.items():
        if not isinstance(index, MetadataIndex) or not isinstance(info, _StorageInfo):
            raise bad(f"a storage entry is a {type(info).__name__}")
        name = info.relative_path
        if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name:
            raise bad(f"the file name {name!r} leaves the checkpoint directory")
        if name not in sizes:
            file = data / name
            if file.is_symlink() or not file.is_file():
                raise bad(f"{str(file)!r} is missing, a symlink or not a plain file")
            if listed is not None and name not in listed:
                raise bad(f"{index.fqn!r} is read from {str(file)!r}, a file the manifest's checksum list "
                          f"does not name, so it was not written with the checkpoint")
            sizes[name] = file.stat().st_size
        offset, length = info.offset, info.length
        if not (isinstance(offset, int) and isinstance(length, int)) or offset < 0 or length < 0 or \
                offset + length > sizes[name]:
            raise bad(f"the byte range {offset!r}+{length!r} lies outside {name!r} ({sizes[name]} bytes)")
        if info.transform_descriptors:
            raise bad(f"{name!r} is stored with transforms {list(info.transform_descriptors)!r}, which xtrain never "
                      f"writes")
        ranges.append((name, offset, length, str(index.fqn)))
    _check_disjoint(ranges, bad)
    total = sum(sizes.values())
    for key, entry in metadata.state_dict_metadata.items():
        if not isinstance(key, str):
            raise bad(f"the key {key!r} is not a string")
        if isinstance(entry, TensorStorageMetadata):
            shape = entry.size
            dtype = getattr(entry.properties, "dtype", None)
            if not isinstance(dtype, torch.dtype) or not all(isinstance(n, int) and n >= 0 for n in shape):
                raise bad(f"the tensor {key!r} has shape {shape!r} and dtype {dtype!r}")
            declared = math.prod(shape) * dtype.itemsize
            if declared > total:
                raise bad(f"the tensor {key!r} declares {declared} bytes, more than the {total} its files hold")
            problem = tiling_problem(tuple(shape), _chunks(key, entry, dtype.itemsize, storage, bad))
            if problem is not None:
                raise bad(f"the chunks of the tensor {key!r} of shape {list(shape)} {problem}")


def _check_disjoint(ranges: list[tuple[str, int, int, str]], bad: Any) -> None:
    """DCP writes every chunk to bytes of its own; entries sharing bytes would let a small file fill any number of
    tensors (each read allocates its own copy), so they are refused."""
    ranges.sort()
    for (name, offset, length, key), (other, start, size, second) in itertools.pairwise(ranges):
        if other == name and start < offset + length:
            who = f"two chunks of the tensor {key!r}" if key == second else f"the tensors {key!r} and {second!r}"
            raise bad(f"{who} are both read from bytes {start}..{min(offset + length, start + size)} of {name!r}; a "
                      f"real checkpoint never shares bytes between chunks")


def _chunks(key: str, entry: Any, itemsize: int, storage: dict[Any, Any], bad: Any) -> list[tuple[Any, Any]]:
    """The ``(offsets, sizes)`` of the chunks of ``key``, each checked to lie inside the tensor and to have stored
    bytes at least as many as its elements take (DCP stores each chunk whole, with ``torch.save``'s framing)."""
    from torch.distributed.checkpoint.metadata import MetadataIndex

    shape = tuple(entry.size)
    boxes = []
    for chunk in entry.chunks if isinstance(entry.chunks, list) else [None]:
        offsets, sizes = getattr(chunk, "offsets", None), getattr(chunk, "sizes", None)
        if (offsets is None or sizes is None or len(offsets) != len(shape) or len(sizes) != len(shape)
                or not all(isinstance(n, int) and n >= 0 for n in (*offsets, *sizes))
                or any(o + n > dim for o, n, dim in zip(offsets, sizes, shape, strict=True))):
            raise bad(f"a chunk of the tensor {key!r} lies outside its shape {list(shape)}")
        info = storage.get(MetadataIndex(key, offsets))
        if info is None:
            raise bad(f"the chunk at {list(offsets)} of the tensor {key!r} has no stored bytes")
        if info.length < math.prod(sizes) * itemsize:
            raise bad(f"the chunk at {list(offsets)} of the tensor {key!r} holds {math.prod(sizes) * itemsize} bytes "
                      f"of elements, but only {info.length} bytes of {info.relative_path!r} are stored for it")
        boxes.append((offsets, sizes))
    return boxes
