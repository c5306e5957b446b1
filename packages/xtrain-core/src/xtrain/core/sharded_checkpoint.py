"""Sharded checkpoints: a directory every rank writes its part of, readable by any strategy at any world size.

A sharded checkpoint at ``P`` (named like a file, e.g. ``epoch=3-step=400.ckpt``) is a directory::

    P/xtrain.json          the manifest, written last: {"xtrain": {strategy, world_size, layout, ...}, "data": ...}
    P/shards-<id>/         a torch.distributed.checkpoint directory with every tensor of the checkpoint
    P/shards-<id>/rest.pt  everything else (loop state, hyper-parameters, ...), read with weights_only=True

The manifest names the data directory and is replaced atomically (temporary file, fsync, rename), so a reader sees
the previous complete checkpoint or the new complete one, never a mix; a save killed half-way leaves an
unreferenced data directory that the next save to ``P`` removes. Overwriting ``P`` (``last.ckpt``) is therefore as
safe as overwriting a single file, and ``P`` stays a plain directory that ``cp -r`` copies.

Reading needs no process group: tensors are read whole (single device, DDP, ``xtrain checkpoint consolidate``) or
straight into the caller's sharded tensors (FSDP at any world size), one piece of code for every strategy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from xtrain.core._internal.read_errors import cannot_read
from xtrain.core.checkpoint_io import PathLike
from xtrain.core.errors import CheckpointError

__all__ = [
    "MANIFEST_FILE", "REST_FILE", "checkpoint_complete", "consolidate", "copy_sharded_checkpoint", "interrupted_save",
    "is_sharded",
    "join_tensors", "make_room_for_directory", "markers", "new_data_name", "read_manifest", "read_sharded_checkpoint", "remove_checkpoint_path",
    "remove_stale_data", "room_for_file", "split_tensors", "tensor_key", "write_manifest",
]

MANIFEST_FILE = "xtrain.json"
REST_FILE = "rest.pt"
_DATA_PREFIX = "shards-"
_MARK = "__xtrain_tensor__"
_DATA_NAME = re.compile(r"shards-[0-9a-f]{1,64}")
_PLAIN_NAME = re.compile(r"(?!\.\.?$)[^/\\]{1,255}")
_MAX_MANIFEST = 64 * 2**20


def is_sharded(path: PathLike) -> bool:
    """Whether ``path`` is a sharded (directory) checkpoint rather than a single file."""
    return Path(path).is_dir()


def checkpoint_complete(path: PathLike) -> bool:
    """A file (written atomically) or a directory whose manifest exists: a checkpoint that can be loaded."""
    p = Path(path)
    return (p / MANIFEST_FILE).is_file() if p.is_dir() else p.is_file()


def interrupted_save(path: PathLike) -> bool:
    """Whether ``path`` is what a killed sharded save left: a directory without a manifest that holds only data
    directories and hidden temporary files. Nothing can load it, and the next save to that name replaces it."""
    p = Path(path)
    if not p.is_dir() or p.is_symlink() or checkpoint_complete(p):
        return False
    try:
        return all(child.name.startswith((_DATA_PREFIX, ".")) for child in p.iterdir())
    except OSError:
        return False


def read_manifest(path: PathLike) -> dict[str, Any]:
    """The checked manifest file of a sharded checkpoint: ``{"xtrain": <manifest>, "data": <data directory name>}``.

    The data directory must be a real directory directly inside ``path`` (no ``..``, no symlink), and the checksum
    list, when present, must name plain files in it.
    """
    from xtrain.core._internal.manifest import check_manifest

    file = Path(path) / MANIFEST_FILE
    if not Path(path).is_dir():
        what = "is a single file, not a sharded checkpoint directory" if Path(path).is_file() else "does not exist"
        raise CheckpointError(f"checkpoint {str(path)!r} {what}.")
    if not file.is_file() or file.is_symlink():
        from xtrain.core._internal.lightning_checkpoint import lightning_directory

        foreign = lightning_directory(Path(path))
        if foreign is not None:
            raise CheckpointError(foreign)
        raise CheckpointError(
            f"checkpoint directory {str(path)!r} has no {MANIFEST_FILE} (or it is a symlink), so it is incomplete (a "
            f"save was interrupted before every rank finished) or not an xtrain checkpoint. Resume from an earlier "
            f"checkpoint.")
    if file.stat().st_size > _MAX_MANIFEST:
        raise CheckpointError(f"the manifest {str(file)!r} is {file.stat().st_size} bytes, more than any real one.")
    try:
        raw = file.read_bytes()
    except OSError as err:
        raise cannot_read(f"the manifest {str(file)!r}", err) from None
    try:
        manifest = json.loads(raw)
        data_name = manifest["data"]
        meta = manifest["xtrain"]
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"the manifest {str(file)!r} is corrupted ({type(err).__name__}: {err}).") from None
    check_manifest(meta, str(file))
    if not isinstance(data_name, str) or not _DATA_NAME.fullmatch(data_name):
        raise CheckpointError(f"the manifest {str(file)!r} names the data directory {data_name!r}, which is not a "
                              f"'{_DATA_PREFIX}<id>' directory inside the checkpoint; refused.")
    data = Path(path) / data_name
    if data.is_symlink() or not data.is_dir():
        raise CheckpointError(f"checkpoint {str(path)!r} names the data directory {data_name!r}, which is missing "
                              f"or a symlink. Resume from an earlier checkpoint.")
    sums = meta.get("checksums")
    if isinstance(sums, dict) and not _valid_checksums(sums):
        raise CheckpointError(f"the manifest {str(file)!r} has a malformed 'checksums' entry; the file is corrupted.")
    return manifest  # type: ignore[no-any-return]


def _valid_checksums(sums: dict[str, Any]) -> bool:
    files = sums.get("files")
    return isinstance(files, dict) and all(
        isinstance(name, str) and _PLAIN_NAME.fullmatch(name) and isinstance(entry, list) and len(entry) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in entry)
        for name, entry in files.items())


def write_manifest(path: PathLike, manifest: dict[str, Any], data: str,
                   checksums: dict[str, list[int]] | None = None) -> None:
    """Commit a sharded checkpoint: atomically point ``path``'s manifest at the complete data directory ``data``.

    ``checksums`` (``{file name: [crc32, size]}`` of every file in ``data``) are recorded for verification on load.
    """
    from xtrain.core._internal.integrity import ALGORITHM
    from xtrain.core.defaults.torch_io import atomic_write

    meta = dict(manifest, layout="sharded")
    meta["checksums"] = {"algorithm": ALGORITHM, "files": checksums} if checksums is not None else "none"
    text = json.dumps({"xtrain": meta, "data": data}, indent=1, default=str)
    atomic_write(Path(path) / MANIFEST_FILE, lambda f: f.write(text.encode()))


def new_data_name() -> str:
    return f"{_DATA_PREFIX}{uuid.uuid4().hex[:12]}"


def remove_stale_data(path: PathLike) -> None:
    """Delete the data directories of ``path`` its manifest does not name (older saves, saves that were killed)."""
    root = Path(path)
    if not root.is_dir():
        return
    keep = None
    if (root / MANIFEST_FILE).is_file():
        try:
            keep = json.loads((root / MANIFEST_FILE).read_text()).get("data")
        except ValueError:
            keep = None
    for child in root.iterdir():
        if child.name.startswith(_DATA_PREFIX) and child.name != keep:
            shutil.rmtree(child, ignore_errors=True)


# -- tensors in and out of the nested checkpoint -----------------------------------------------------------------
def tensor_key(path: tuple[str | int, ...]) -> str:
    """The ``torch.distributed.checkpoint`` key of the tensor at ``path`` in a nested checkpoint."""
    return ".".join(str(part) for part in path)


def _walk(data: Any, path: tuple[str | int, ...], leaf: Callable[[torch.Tensor, tuple[str | int, ...]], Any]) -> Any:
    if isinstance(data, torch.Tensor):
        return leaf(data, path)
    if isinstance(data, Mapping):
        return {k: _walk(v, (*path, k), leaf) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        items = [_walk(v, (*path, i), leaf) for i, v in enumerate(data)]
        return items if isinstance(data, list) else tuple(items)
    return data


def split_tensors(checkpoint: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Take every tensor out of ``checkpoint``: ``(tensors by key, the rest with a marker where each tensor was)``."""
    tensors: dict[str, torch.Tensor] = {}

    def take(tensor: torch.Tensor, path: tuple[str | int, ...]) -> dict[str, str]:
        key = tensor_key(path)
        if key in tensors:
            raise CheckpointError(f"two entries of the checkpoint map to the key {key!r}; rename one of them.")
        tensors[key] = tensor
        return {_MARK: key}

    rest = _walk(dict(checkpoint), (), take)
    return tensors, rest  # type: ignore[return-value]


def join_tensors(rest: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    """Put the tensors :func:`split_tensors` took back where their markers are."""
    if isinstance(rest, Mapping):
        if set(rest) == {_MARK}:
            return tensors[rest[_MARK]]
        return {k: join_tensors(v, tensors) for k, v in rest.items()}
    if isinstance(rest, (list, tuple)):
        items = [join_tensors(v, tensors) for v in rest]
        return items if isinstance(rest, list) else tuple(items)
    return rest


def markers(rest: Any, found: list[str] | None = None) -> list[str]:
    """The keys of the tensors :func:`split_tensors` took out of ``rest``."""
    found = [] if found is None else found
    if isinstance(rest, Mapping):
        if set(rest) == {_MARK}:
            found.append(rest[_MARK])
        else:
            for v in rest.values():
                markers(v, found)
    elif isinstance(rest, (list, tuple)):
        for v in rest:
            markers(v, found)
    return found


# -- reading ---------------------------------------------------------------------------------------------------------
def read_sharded_checkpoint(path: PathLike, *, template: Mapping[str, Any] | None = None,
                            verify: bool = True) -> dict[str, Any]:
    """Read a sharded checkpoint into one checkpoint dict through the checkpoint gate; no process group is needed.

    Args:
        path: The checkpoint directory.
        template: A checkpoint-shaped dict of fresh tensors to read into, e.g. ``{"state_dict": <a copy of the
            sharded state dict>}``: each rank then reads only the slices its own shards hold, whatever world size
            wrote the checkpoint. Tensors it does not hold (or holds with another shape) are read whole.
        verify: Check every file against the checksums in the manifest first.
    """
    from xtrain.core._internal.checkpoint_gate import read_sharded

    return read_sharded(path, template=template, verify=verify)


# -- copies, removal and conversion -------------------------------------------------------------------------------
def copy_sharded_checkpoint(source: PathLike, destination: PathLike) -> None:
    """Make ``destination`` a copy of the sharded checkpoint ``source`` (hard links where possible), atomically.

    Hard links make the copy cheap and independent: removing or overwriting ``source`` later leaves it intact.
    """
    manifest = read_manifest(source)
    target = Path(destination)
    aside = make_room_for_directory(target)
    name = new_data_name()
    src_data, dst_data = Path(source) / manifest["data"], target / name
    dst_data.mkdir(parents=True)
    for file in src_data.iterdir():
        try:
            os.link(file, dst_data / file.name)
        except OSError:
            shutil.copy2(file, dst_data / file.name)
    sums = manifest["xtrain"].get("checksums")
    write_manifest(target, manifest["xtrain"], name, sums["files"] if isinstance(sums, dict) else None)
    remove_stale_data(target)
    if aside is not None:
        aside.unlink(missing_ok=True)


def make_room_for_directory(target: Path) -> Path | None:
    """A single-file checkpoint where a directory is to go (the run switched strategy) is moved aside first."""
    if target.is_file() or target.is_symlink():
        aside = target.with_name(f".{target.name}.replaced")
        os.replace(target, aside)
        return aside
    return None


@contextmanager
def room_for_file(path: PathLike) -> Iterator[None]:
    """A sharded checkpoint directory where a file is to go (the run switched strategy) is moved aside meanwhile."""
    target = Path(path)
    aside = target.with_name(f".{target.name}.replaced") if target.is_dir() else None
    if aside is not None:
        remove_checkpoint_path(aside)
        target.replace(aside)
    yield
    if aside is not None:
        remove_checkpoint_path(aside)


def remove_checkpoint_path(path: PathLike) -> None:
    """Delete a checkpoint, file or directory."""
    p = Path(path)
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def consolidate(source: PathLike, destination: PathLike) -> dict[str, Any]:
    """Write the sharded checkpoint ``source`` as one file loadable with ``torch.load(weights_only=True)``.

    Returns the manifest written (``layout`` becomes ``"full"``; strategy and world size still say how it was
    trained).
    """
    from xtrain.core.defaults.torch_io import save_file

    checkpoint = read_sharded_checkpoint(source)
    from xtrain.core._internal.integrity import ALGORITHM

    checkpoint["xtrain"] = dict(checkpoint["xtrain"], layout="full", consolidated_from=str(source), checksums=ALGORITHM)
    target = Path(destination)
    if target.is_dir():
        raise CheckpointError(f"{str(target)!r} is a directory; pass a file name for the consolidated checkpoint.")
    save_file(checkpoint, target)
    return checkpoint["xtrain"]  # type: ignore[no-any-return]
