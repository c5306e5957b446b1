"""The one message for a checkpoint file the operating system would not let us read, wherever it is read.

A permission, I/O or missing-file error says nothing about the file's bytes: calling it "corrupted" would send the
user to an earlier checkpoint when the fix is the file's permissions or the disk.
"""

from __future__ import annotations

import errno

from xtrain.core.errors import CheckpointError

__all__ = ["ACCESS_ERRNOS", "cannot_read"]

ACCESS_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EIO, errno.EROFS, errno.ENOENT, errno.EISDIR})


def cannot_read(subject: str, err: OSError) -> CheckpointError:
    """The error for ``subject`` (e.g. ``"checkpoint '/ckpt/last'"``) that ``err`` kept us from reading."""
    return CheckpointError(f"{subject} cannot be read ({type(err).__name__}: {err}). Check the permissions of its "
                           f"files and the disk.")
