"""The CheckpointIO contract: bytes on disk.

It writes, reads and removes single-file checkpoints. What goes into a checkpoint is the Strategy's and the
Trainer's business; where and how bytes land (atomic rename, object store, a background thread) is this plugin's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

__all__ = ["CheckpointIO", "PathLike"]

PathLike = str | Path


class CheckpointIO(ABC):
    """Base class of every checkpoint IO plugin.

    Implementations must make :meth:`save_checkpoint` atomic: a reader sees the previous file or the new one,
    never a partial one, even if the process is killed mid-write.

    Attributes:
        checksums: Write checksums with every checkpoint and verify them before a load (the default). Sharded
            checkpoints written by the strategy follow this setting too. Turn it off only where the storage
            verifies the bytes itself.
    """

    name: ClassVar[str]
    checksums: bool = True

    @abstractmethod
    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike) -> None:
        """Serialize ``checkpoint`` to ``path`` atomically."""

    @abstractmethod
    def load_checkpoint(self, path: PathLike, *, map_location: Any = "cpu") -> dict[str, Any]:
        """Read a checkpoint safely (no arbitrary code may run), or raise :class:`~xtrain.core.errors.CheckpointError`.

        Implementations read through :func:`xtrain.core.checkpoint_reader.read_checkpoint` or guarantee the same.
        The error's message names the path and says what is wrong in the words users meet everywhere else (and the
        conformance kit looks for): ``does not exist`` for a missing file, ``truncated or corrupted`` for bytes that
        do not read back.
        """

    @abstractmethod
    def remove_checkpoint(self, path: PathLike) -> None:
        """Delete a checkpoint written by :meth:`save_checkpoint`."""

    def copy_checkpoint(self, source: PathLike, destination: PathLike) -> None:
        """Make ``destination`` an atomic copy of the checkpoint at ``source`` (``last.ckpt`` beside a top-k file).

        The default reads and writes; implementations override it with something cheaper (a hard link).
        """
        self.save_checkpoint(self.load_checkpoint(source), destination)

    def wait(self) -> None:
        """Block until every save started so far is on disk (asynchronous implementations override this)."""

    def settle(self) -> None:
        """Block until the saves that have returned are at their paths.

        Called where a caller needs the file right after saving (``Trainer.save_checkpoint``, ``Engine.save``, a
        preemption save), unlike the routine saves of ``ModelCheckpoint``. Implementations that finish a save in the
        background (``TorchCheckpointIO`` syncs and renames there) override it; asynchronous ones leave their
        saves in flight, because their user chose that.
        """

    def teardown(self) -> None:
        """Finish pending work; the default waits for pending saves."""
        self.wait()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
