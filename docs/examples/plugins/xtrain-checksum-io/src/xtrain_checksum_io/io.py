"""A CheckpointIO whose files end with the SHA-256 of their content, checked before anything is unpickled."""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import torch
from typing_extensions import override

from xtrain.core.checkpoint_io import CheckpointIO, PathLike
from xtrain.core.errors import CheckpointError

_DIGEST = 32  # bytes of a SHA-256


class ChecksumCheckpointIO(CheckpointIO):
    """``torch.save`` bytes followed by their SHA-256; a file that does not match is refused, never loaded."""

    name: ClassVar[str] = "checksum"

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike) -> None:
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        data = buffer.getvalue()
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        # Atomic: write a temporary file beside the target, flush it to disk, then rename over the target.
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data + hashlib.sha256(data).digest())
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    @override
    def load_checkpoint(self, path: PathLike, *, map_location: Any = "cpu") -> dict[str, Any]:
        target = Path(path)
        if not target.is_file():
            raise CheckpointError(f"checkpoint {str(target)!r} does not exist. Fix: check the path.")
        raw = target.read_bytes()
        data, digest = raw[:-_DIGEST], raw[-_DIGEST:]
        if len(raw) <= _DIGEST or hashlib.sha256(data).digest() != digest:
            raise CheckpointError(f"checkpoint {str(target)!r} is truncated or corrupted (its SHA-256 does not "
                                  f"match). Fix: use another checkpoint.")
        loaded = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
        if not isinstance(loaded, dict):
            raise CheckpointError(f"checkpoint {str(target)!r} does not hold a dict.")
        return loaded

    @override
    def remove_checkpoint(self, path: PathLike) -> None:
        Path(path).unlink(missing_ok=True)
