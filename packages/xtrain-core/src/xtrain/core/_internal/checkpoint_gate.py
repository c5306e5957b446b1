"""The one gate every checkpoint read goes through: it checks before it trusts, and it never runs code.

Full files are zip archives written by ``torch.save``: their records are checked against the CRC-32s stored with
them, then they are unpickled with ``weights_only=True``. Sharded directories: the JSON manifest is checked field by
field, every file it lists is checked against its checksum, DCP's pickled ``.metadata`` is read with an allowlist
unpickler (:mod:`~xtrain.core._internal.safe_metadata`) and checked against the files, and only then are tensors read
(DCP reads each with ``weights_only=True``). Anything unexpected is a :class:`CheckpointError` naming the file.
"""

from __future__ import annotations

import functools
import os
import pickle
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from xtrain.core._internal.bounded import check_checkpoint_hparams
from xtrain.core._internal.integrity import ALGORITHM, UNVERIFIED_FIX, verify_files, verify_zip
from xtrain.core._internal.manifest import check_manifest
from xtrain.core._internal.read_errors import ACCESS_ERRNOS, cannot_read
from xtrain.core._internal.safe_metadata import check_metadata, load_metadata
from xtrain.core.errors import CheckpointError

__all__ = ["inspect_checkpoint", "peek_manifest", "read_checkpoint", "read_full_file", "read_sharded"]

"""Errors of the file system, not of the bytes: the message points at permissions and the disk."""


def read_checkpoint(path: str | Path, *, template: Mapping[str, Any] | None = None, verify: bool = True,
                    map_location: Any = "cpu") -> dict[str, Any]:
    """Read a checkpoint file or sharded directory; see :func:`xtrain.core.checkpoint_reader.read_checkpoint`."""
    if Path(path).is_dir():
        return read_sharded(path, template=template, verify=verify)
    return read_full_file(path, verify=verify, map_location=map_location)


def inspect_checkpoint(path: str | Path, *, verify: bool = True) -> tuple[dict[str, Any], list[str]]:
    """``(manifest, top-level keys)`` of a checkpoint, after every check a load makes, without reading the tensors
    of a sharded one into memory."""
    from xtrain.core.sharded_checkpoint import REST_FILE, read_manifest

    if not Path(path).is_dir():
        checkpoint = read_full_file(path, verify=verify, map_location="meta")
        return checkpoint.get("xtrain", {}), sorted(checkpoint)
    with _malformed_is_refused(path):
        manifest = read_manifest(path)
        data = Path(path) / manifest["data"]
        _check_sharded_files(str(path), data, manifest["xtrain"], verify=verify)
        return manifest["xtrain"], sorted([*read_full_file(data / REST_FILE, verify=verify), "xtrain"])


def _check_sharded_files(name: str, data: Path, meta: dict[str, Any], *, verify: bool) -> Any:
    """Checksums (``verify``), then DCP's metadata read with the allowlist and checked against the files."""
    sums = meta.get("checksums")
    if verify and isinstance(sums, dict):
        verify_files(data, sums["files"], checkpoint=name)
    from xtrain.core.sharded_checkpoint import REST_FILE

    metadata = load_metadata(data / ".metadata", checkpoint=name)
    check_metadata(metadata, data, checkpoint=name, listed=sums["files"] if isinstance(sums, dict) else None)
    rest = data / REST_FILE
    if rest.is_symlink() or not rest.is_file():
        raise CheckpointError(f"checkpoint {name!r}: {str(rest)!r} is a symlink or not a plain file; refused (a "
                              f"checkpoint's files must lie in its directory). Resume from an earlier checkpoint.")
    return metadata


def peek_manifest(path: str | Path) -> dict[str, Any] | None:
    """The manifest of a checkpoint without reading its tensors (memory-mapped), or ``None`` if it has none.

    For messages only (which run wrote it); the real load checks everything and reports what is wrong.
    """
    from xtrain.core.sharded_checkpoint import read_manifest

    try:
        if Path(path).is_dir():
            meta = read_manifest(path)["xtrain"]
        else:
            meta = torch.load(path, mmap=True, weights_only=True, map_location="cpu").get("xtrain")
        return check_manifest(meta, str(path))
    except Exception:  # noqa: BLE001 - unreadable here means the load will say why
        return None


def read_full_file(path: str | Path, *, verify: bool = True, map_location: Any = "cpu") -> dict[str, Any]:
    """Load a ``torch.save`` file: CRC-32s checked (``verify``), then ``weights_only=True``."""
    file = Path(path)
    if not file.is_file():
        raise CheckpointError(f"checkpoint {str(file)!r} does not exist (or is not a file).")
    try:
        _refuse_foreign(file)
        verified = verify_zip(file) if verify else True
        loaded = torch.load(file, map_location=map_location, weights_only=True)
    except CheckpointError:
        raise
    except pickle.UnpicklingError as err:
        raise CheckpointError(
            f"checkpoint {str(file)!r} holds objects that are not plain tensors or containers, so it was refused "
            f"unread (weights_only=True) and nothing in it was executed ({_refusal(err)}). Do not load a file you did "
            f"not write with weights_only=False: that runs whatever it holds. If you wrote it yourself with custom "
            f"objects, store them as tensors, numbers, strings, lists or dicts instead; a Lightning checkpoint whose "
            f"save_hyperparameters recorded an object (an Enum, an argparse.Namespace, a module, a functools.partial) "
            f"is such a file. If you trust it and the classes named above are yours, allow them and load again: "
            f"torch.serialization.add_safe_globals([TheClass, ...]) keeps the hyperparameters; or read it yourself "
            f"(ckpt = torch.load(path, weights_only=False)) and load ckpt['state_dict'] into your model with "
            f"load_state_dict."
        ) from None
    except OSError as err:
        raise _damaged(file, err) from None
    except (zipfile.BadZipFile, EOFError) as err:
        raise CheckpointError(f"checkpoint {str(file)!r} is not a checkpoint file, or is truncated or corrupted "
                              f"({type(err).__name__}: {err}). Resume from an earlier checkpoint.") from None
    except Exception as err:  # noqa: BLE001 - torch and zipfile raise many types for damaged bytes
        raise CheckpointError(f"checkpoint {str(file)!r} is truncated or corrupted ({type(err).__name__}: "
                              f"{str(err)[:300]}). Resume from an earlier checkpoint.") from None
    if not isinstance(loaded, dict):
        raise CheckpointError(f"checkpoint {str(file)!r} holds a {type(loaded).__name__}, not a checkpoint dict.")
    if "xtrain" in loaded:
        check_manifest(loaded["xtrain"], str(file))
        if not verified and loaded["xtrain"].get("checksums") == ALGORITHM:
            raise CheckpointError(f"checkpoint {str(file)!r}: its manifest says it was sealed with a CRC-32 when it "
                                  f"was written, but it carries none (its end was rewritten, or it was saved with "
                                  f"another tool since), so it cannot be verified. {UNVERIFIED_FIX}")
    check_checkpoint_hparams(loaded, str(file))
    return loaded


def _refuse_foreign(file: Path) -> None:
    """A file that is neither a ``torch.save`` zip archive nor torch's legacy format (a pickle) is no checkpoint: say
    so, rather than what torch's reader makes of its first bytes (an image is not a hostile pickle)."""
    with file.open("rb") as f:
        head = f.read(8)
    if not head:
        raise CheckpointError(f"checkpoint {str(file)!r} is empty (0 bytes): its save never wrote it. Resume from an "
                              f"earlier checkpoint.")
    if not head.startswith((b"PK\x03\x04", b"\x80")):
        raise CheckpointError(f"checkpoint {str(file)!r} is not a checkpoint file, or its first bytes are damaged: it "
                              f"is not a torch.save archive (it begins with {head!r}). Pass a .ckpt that Trainer.fit, "
                              f"ModelCheckpoint or torch.save wrote.")
    if head.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(file) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError):
            return  # a damaged archive: the CRC check and torch's reader say what is wrong
        if not any(name.endswith("/data.pkl") for name in names):
            raise CheckpointError(f"checkpoint {str(file)!r} is a zip archive that torch.save did not write (it holds "
                                  f"{', '.join(map(repr, names[:3]))[:200]}{', ...' if len(names) > 3 else ''}). Pass "
                                  f"a .ckpt that Trainer.fit, ModelCheckpoint or torch.save wrote.")


def _refusal(err: BaseException) -> str:
    """torch's reason for a weights_only refusal: the line naming what was blocked, never its advice to retry with
    weights_only=False (for a hostile file, the one thing not to do)."""
    lines = [line.strip() for line in str(err).splitlines()]
    named = [line for line in lines if "unsupported" in line.lower() and "weights_only" not in line]
    if not named:
        return "an object outside the tensor and container allowlist"
    line = named[0]  # bounded (it quotes names from the file), cut at a sentence's end rather than mid-word
    return line if len(line) <= 500 else line[:500].rsplit(". ", 1)[0] + "."


def _damaged(path: str | Path, err: BaseException) -> CheckpointError:
    """A malformed checkpoint found by an error the checks did not foresee, as the :class:`CheckpointError` it is."""
    if isinstance(err, OSError) and err.errno in ACCESS_ERRNOS:
        return cannot_read(f"checkpoint {str(path)!r}", err)
    if isinstance(err, OSError):  # EINVAL and the like: torch's reader met offsets beyond a file cut short
        return CheckpointError(f"checkpoint {str(path)!r} is truncated or corrupted ({type(err).__name__}: {err}). "
                               f"Resume from an earlier checkpoint.")
    return CheckpointError(f"checkpoint {str(path)!r} is malformed ({type(err).__name__}: {str(err)[:200]}); "
                           f"refused. Resume from an earlier checkpoint.")


@contextmanager
def _malformed_is_refused(path: str | Path) -> Iterator[None]:
    """Turn an error the sharded checks did not foresee (a field of the wrong type, deeply nested JSON, an unreadable
    file) into the :class:`CheckpointError` it is, so callers such as ``ckpt_path="auto"`` can skip the file."""
    try:
        yield
    except CheckpointError:
        raise
    except (OSError, RuntimeError, MemoryError, TypeError, ValueError, KeyError, IndexError, AttributeError) as err:
        # RuntimeError (RecursionError, or torch refusing an allocation a crafted shape asks for) and MemoryError:
        # only the file's bytes run here, never user code, so they are the file's fault like the others.
        raise _damaged(path, err) from err


def read_sharded(path: str | Path, *, template: Mapping[str, Any] | None = None,
                 verify: bool = True) -> dict[str, Any]:
    """Read a sharded checkpoint directory into one checkpoint dict; no process group is needed; any malformation
    the checks did not name is still a :class:`CheckpointError`.

    ``template``'s tensors (e.g. ``{"state_dict": <a sharded state dict>}``) say which slices this rank reads:
    each of the same shape is read into (the caller passes fresh tensors, never live ones). Others are read whole.
    """
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException, not an Exception
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    from torch.distributed.checkpoint.state_dict_loader import load

    from xtrain.core.sharded_checkpoint import REST_FILE, join_tensors, markers, read_manifest, split_tensors

    name = str(path)
    with _malformed_is_refused(path):
        manifest = read_manifest(path)
        data = Path(path) / manifest["data"]
        metadata = _check_sharded_files(name, data, manifest["xtrain"], verify=verify)
        rest = read_full_file(data / REST_FILE, verify=verify)
        stored = metadata.state_dict_metadata
        targets = split_tensors(template)[0] if template is not None else {}
        wanted: dict[str, torch.Tensor] = {}
        room = _memory()
        for key in markers(rest):
            info = stored.get(key)
            if not isinstance(info, TensorStorageMetadata):
                raise CheckpointError(f"checkpoint {name!r} lists the tensor {key!r} but holds no data for it.")
            target = targets.get(key)
            if target is not None and tuple(target.shape) == tuple(info.size) and target.dtype == info.properties.dtype:
                wanted[key] = target
            else:
                wanted[key] = _allocate(name, key, info, room)
                room = None if room is None else room - wanted[key].nbytes
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
            try:
                load(wanted, storage_reader=_VettedReader(data, metadata), no_dist=True)
            except (Exception, CheckpointException) as err:  # noqa: BLE001 - a missing, truncated or refused shard
                text = str(err)
                if "weights_only" in text or "Unpickl" in text:
                    raise CheckpointError(f"checkpoint {name!r}: a shard in {str(data)!r} holds objects that are "
                                          f"not plain tensors, so it was refused unread (weights_only=True) and "
                                          f"nothing in it was executed ({_refusal(err)}). Resume from an earlier "
                                          f"checkpoint.") from None
                last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), type(err).__name__)
                raise CheckpointError(f"checkpoint {name!r}: reading the shards in {str(data)!r} failed "
                                      f"({type(err).__name__}: {last[:300]}). Resume from an earlier "
                                      f"checkpoint.") from None
        checkpoint: dict[str, Any] = join_tensors(rest, wanted)
        checkpoint["xtrain"] = manifest["xtrain"]
        return checkpoint


def _allocate(name: str, key: str, info: Any, room: int | None) -> torch.Tensor:
    """A zeroed tensor for ``key``: never memory that held other data, whatever the chunks leave unwritten.

    A tensor larger than the memory left (``room``: RAM and swap less the tensors already allocated) is refused
    before the allocation, which on a system that overcommits would succeed and then exhaust memory while zeroing;
    one the allocator refuses is the checkpoint's fault too, and is named as such rather than as the allocator's
    error, so callers (``ckpt_path="auto"``, the CLI) see a :class:`CheckpointError`.
    """
    claimed = info.size.numel() * info.properties.dtype.itemsize
    refusal = (f"checkpoint {name!r}: the tensor {key!r} claims {claimed} bytes (shape {list(info.size)}, "
               f"{info.properties.dtype}), more than this machine can allocate")
    advice = ("The checkpoint is probably damaged or hostile; resume from an earlier checkpoint (a genuine one this "
              "large is read with a template, each rank reading only its shards).")
    if room is not None and claimed > room:
        raise CheckpointError(f"{refusal} ({room} bytes of memory left for its tensors). {advice}")
    try:
        return torch.zeros(info.size, dtype=info.properties.dtype)
    except (RuntimeError, MemoryError) as err:
        raise CheckpointError(f"{refusal} ({type(err).__name__}: {str(err)[:200]}). {advice}") from None


def _memory() -> int | None:
    """RAM plus swap in bytes (``None`` where the system does not say): no tensor read whole can be larger."""
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    try:
        with open("/proc/meminfo") as f:
            swap = next((int(line.split()[1]) * 1024 for line in f if line.startswith("SwapTotal:")), 0)
    except (OSError, ValueError, IndexError):
        swap = 0
    return ram + swap if ram > 0 else None


@functools.cache
def _vetted_reader_class() -> type:
    from torch.distributed.checkpoint.filesystem import FileSystemReader

    class VettedReader(FileSystemReader):
        """DCP's reader, handed metadata that was already read safely instead of unpickling the file itself."""

        def __init__(self, path: Path, metadata: Any) -> None:
            super().__init__(str(path))
            self._vetted = metadata

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            from torch.distributed.checkpoint.metadata import StorageMeta

            if getattr(self._vetted, "storage_meta", None) is None:
                self._vetted.storage_meta = StorageMeta()
            self._vetted.storage_meta.load_id = self.load_id
            return self._vetted

    return VettedReader


def _VettedReader(path: Path, metadata: Any) -> Any:
    return _vetted_reader_class()(path, metadata)
