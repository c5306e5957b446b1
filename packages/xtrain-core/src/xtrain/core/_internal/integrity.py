"""Checksums of checkpoint bytes: computed while they are written, verified before they are used.

One CRC-32 of every file, computed by :class:`HashingStream` as the bytes go to disk (never by reading them back).
A full checkpoint (a ``torch.save`` zip archive) carries its own in the archive's comment (``xtrain-crc32:<hex>``,
which every zip reader, ``torch.load`` included, ignores); a sharded checkpoint's manifest lists one per file.
ISA-L's CRC-32 runs at memory speed (~15 GB/s), several times faster than the per-record CRC ``torch.save``
computes itself, which is therefore switched off when xtrain writes. Files without the comment (written by plain
``torch.save``) are checked against those per-record CRCs instead, when they have them.
"""

from __future__ import annotations

import functools
import mmap
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from xtrain.core.errors import CheckpointError

__all__ = ["ALGORITHM", "UNVERIFIED_FIX", "HashingStream", "crc32", "file_checksum", "seal_zip", "verify_files",
           "verify_zip"]

ALGORITHM = "crc32"
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_TAG = b"xtrain-crc32:"
_TRAILER = len(_TAG) + 8
_END_RECORD = 22
_END_SIGNATURE = b"PK\x05\x06"
_ZIP_START = b"PK\x03\x04"
_MAX_COMMENT = 0xFFFF
UNVERIFIED_FIX = ("Resume from an earlier checkpoint, or load it unverified if you verify it elsewhere: "
                  "Trainer(plugins=[TorchCheckpointIO(checksums=False)]), from xtrain.core.defaults import "
                  "TorchCheckpointIO. A file written through another CheckpointIO plugin (plugins=[...] in its "
                  "Trainer) is read with that plugin: plugin.load_checkpoint(path).")


@functools.cache  # resolved at the first checksum: importing isal is 0.6 ms of every `import xtrain.core`
def _crc_function() -> Callable[[Any, int], int]:
    try:
        from isal.isal_zlib import crc32 as fast
    except ImportError:  # pragma: no cover - isal is a dependency; a platform without a wheel still works
        from zlib import crc32 as slow

        return slow
    return fast  # type: ignore[no-any-return]


def crc32(data: Any, value: int = 0) -> int:
    """CRC-32 of a bytes-like object, continuing from ``value``."""
    return _crc_function()(data, value) & 0xFFFFFFFF


class HashingStream:
    """A write-only file wrapper that keeps the CRC-32 and length of everything written through it.

    Args:
        inner: The file written to.
        coalesce: Writes smaller than this many bytes are gathered and handed on (and hashed) together once that
            much has gathered, or at :meth:`finish`. ``torch.save`` writes a record's header, name and padding
            separately: a small checkpoint is dozens of writes, each a trip through the wrappers below. ``0``
            hands every write on at once (a caller that syncs the inner file while it writes needs that).
    """

    def __init__(self, inner: IO[bytes], *, coalesce: int = 0) -> None:
        self._inner = inner
        self._coalesce = coalesce
        self._pending = bytearray()
        self.crc = 0
        self.size = 0
        self.tail = b""

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        size = view.nbytes
        self.size += size
        if size < self._coalesce:
            self._pending += view
            if len(self._pending) >= self._coalesce:
                self.finish()
            return size
        self.finish()
        self._emit(view)
        return size

    def finish(self) -> None:
        """Hand on what was gathered; :attr:`crc` and :attr:`tail` cover every byte written after this."""
        if self._pending:
            pending, self._pending = self._pending, bytearray()
            self._emit(memoryview(pending))

    def flush(self) -> None:
        self.finish()
        self._inner.flush()

    def _emit(self, view: memoryview) -> None:
        self.crc = crc32(view, self.crc)
        self.tail = (self.tail + bytes(view[-2:]))[-2:]
        self._inner.write(view)

    def tell(self) -> int:
        return self.size

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def file_checksum(path: Path) -> tuple[int, int]:
    """``(crc32, size)`` of a file, read through a memory map (no copy)."""
    with path.open("rb") as f:
        size = path.stat().st_size
        if size == 0:
            return 0, 0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return crc32(view), size


def verify_files(root: Path, expected: dict[str, Any], *, checkpoint: str) -> None:
    """Compare every file named in a sharded manifest's checksum list with its bytes on disk.

    Sizes are compared first, from the file system: a crafted list naming a multi-gigabyte (or sparse) file is
    refused at once instead of after reading all of it.
    """
    for name, entry in expected.items():
        crc, size = entry
        file = root / name
        if file.is_symlink() or not file.is_file():
            raise CheckpointError(f"checkpoint {checkpoint!r}: the file {str(file)!r} its manifest lists is "
                                  f"missing, a symlink or not a plain file. Resume from an earlier checkpoint.")
        actual = file.stat().st_size
        found = file_checksum(file)[0] if actual == size else None
        if found != crc:
            shown = "not computed" if found is None else f"{found:08x}"
            raise CheckpointError(
                f"checkpoint {checkpoint!r}: the file {str(file)!r} does not match the checksum its manifest "
                f"recorded (size {actual} vs {size} bytes, crc32 {shown} vs {crc:08x}): it was corrupted "
                f"or changed after it was written. Resume from an earlier checkpoint.")


def seal_zip(f: IO[bytes], hashed: HashingStream) -> None:
    """Store the CRC-32 of the zip archive just written through ``hashed`` (at the end of ``f``) in its comment.

    The archive ends with the end-of-central-directory record, whose last two bytes are the comment's length (0 as
    torch writes it); the checksum covers every byte written, those two included, as they were.
    """
    hashed.finish()
    if hashed.size < _END_RECORD or hashed.tail != b"\x00\x00":
        return
    f.seek(hashed.size - 2)
    f.write(struct.pack("<H", _TRAILER) + _TAG + f"{hashed.crc:08x}".encode())


def _sealed(path: Path, size: int) -> int | None:
    """The CRC-32 a sealed archive carries, or ``None`` if it carries none.

    The end record is looked for as far back as a zip comment reaches (64 KiB), and its comment must end the file
    exactly: an end record followed by other bytes (appended data, or a cut or flipped comment length) means damage
    there. Without this, bytes appended after a seal moved it out of sight and turned verification off instead of
    failing it (zip readers, torch's included, ignore data after the archive). A file that neither starts as a zip
    archive nor carries a seal is left alone: torch's legacy (pre-zip) format ends with raw tensor bytes, in which
    the end record's signature may occur by chance.
    """
    window = min(size, _END_RECORD + _MAX_COMMENT)
    with path.open("rb") as f:
        head = f.read(len(_ZIP_START))
        f.seek(size - window)
        tail = f.read()
    if head != _ZIP_START and _TAG not in tail:
        return None
    at = tail.rfind(_END_SIGNATURE)
    if at < 0:
        return None  # no end record within reach: not a zip archive; torch.load judges what it is
    first = at
    while at >= 0 and not _ends_file(tail, at):
        at = tail.rfind(_END_SIGNATURE, 0, at)
    if at < 0:
        length = struct.unpack_from("<H", tail, first + _END_RECORD - 2)[0] if first + _END_RECORD <= len(tail) else -1
        raise CheckpointError(f"checkpoint {str(path)!r}: its zip end record is cut short, or is followed by bytes "
                              f"that are not the comment it announces ({length} bytes announced, "
                              f"{len(tail) - first - _END_RECORD} follow it): it is torn or was changed (e.g. "
                              f"appended to) after it was written, or a CheckpointIO plugin wrote it in a format of "
                              f"its own (then read it with that plugin: the Trainer(plugins=[...]) that saved it). "
                              f"{UNVERIFIED_FIX}")
    comment = tail[at + _END_RECORD:]
    if len(comment) != _TRAILER:
        return None
    digits = comment[len(_TAG):]
    if not comment.startswith(_TAG) or not all(c in b"0123456789abcdef" for c in digits):
        raise CheckpointError(f"checkpoint {str(path)!r}: the checksum written at its end is damaged "
                              f"({comment!r}), so the file cannot be verified. {UNVERIFIED_FIX}")
    return int(digits, 16)


def _ends_file(tail: bytes, at: int) -> bool:
    """Whether the end record at ``at`` of ``tail`` (the file's last bytes) and the comment it announces end the file."""
    if at + _END_RECORD > len(tail):
        return False
    length: int = struct.unpack_from("<H", tail, at + _END_RECORD - 2)[0]
    return at + _END_RECORD + length == len(tail)


def verify_zip(path: Path) -> bool:
    """Check a ``torch.save`` zip archive: against its sealed CRC-32, or else every record against its own.

    Archives written by torch with ``torch.utils.serialization.config.save.compute_crc32 = False`` and not sealed
    store 0 for every record (so do xtrain's with ``checksums=False``, and the rest file of a sharded checkpoint,
    which its manifest's list covers); they cannot be verified and pass unchecked (one flipped byte cannot zero every
    CRC). The caller refuses such a file when its manifest says it was sealed.

    Returns:
        Whether the bytes were verified: ``False`` for a file that carries no checksum at all.
    """
    size = path.stat().st_size
    expected = _sealed(path, size)
    if expected is not None:
        end = size - _TRAILER - 2
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view, \
                memoryview(view) as whole, whole[:end] as body:
            found = crc32(b"\x00\x00", crc32(body))
        if found != expected:
            raise CheckpointError(
                f"checkpoint {str(path)!r} does not match the CRC-32 written with it ({found:08x} vs {expected:08x}): "
                f"the file was corrupted after it was written. {UNVERIFIED_FIX}")
        return True
    if not zipfile.is_zipfile(path):
        return False  # torch's legacy (pre-zip) format carries no checksum; torch.load(weights_only=True) judges it
    with path.open("rb") as f, zipfile.ZipFile(f) as archive:
        records = [info for info in archive.infolist() if info.file_size]
        if not records or all(info.CRC == 0 for info in records):
            return False
        size = path.stat().st_size
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view, memoryview(view) as whole:
            for info in records:
                _verify_record(path, whole, info, size)
    return True


def _verify_record(path: Path, whole: memoryview, info: zipfile.ZipInfo, size: int) -> None:
    if info.compress_type != zipfile.ZIP_STORED or info.header_offset + _LOCAL_HEADER.size > size:
        raise CheckpointError(f"checkpoint {str(path)!r}: the record {info.filename!r} is not stored the way "
                              f"torch.save stores it, so the file is corrupted.")
    fields = _LOCAL_HEADER.unpack_from(whole, info.header_offset)
    start = info.header_offset + _LOCAL_HEADER.size + fields[10] + fields[11]
    end = start + info.compress_size
    with whole[start:end] as part:
        found = crc32(part) if end <= size else None
    if fields[0] != b"PK\x03\x04" or found != info.CRC:
        raise CheckpointError(
            f"checkpoint {str(path)!r}: the record {info.filename!r} ({_what(info.filename)}) does not match the "
            f"CRC-32 written with it: the file was corrupted after it was written. {UNVERIFIED_FIX}")


def _what(record: str) -> str:
    name = record.rsplit("/", 1)[-1]
    if "/data/" in record:
        return f"tensor storage {name}"
    return "the pickled structure" if name == "data.pkl" else "metadata"
