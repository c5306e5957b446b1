"""Checkpoints written in a background thread, so training continues while bytes go to disk."""

from __future__ import annotations

import atexit
import threading
import weakref
from typing import Any, ClassVar

from typing_extensions import override

from xtrain.core._internal.apply import apply_to_tensors
from xtrain.core.checkpoint_io import CheckpointIO, PathLike
from xtrain.core.defaults.torch_io import TorchCheckpointIO

__all__ = ["AsyncCheckpointIO"]

_LIVE: weakref.WeakSet[AsyncCheckpointIO] = weakref.WeakSet()


def _wait_all() -> None:
    for io in list(_LIVE):
        io.wait()


atexit.register(_wait_all)


class AsyncCheckpointIO(CheckpointIO):
    """Saves through another CheckpointIO on a background thread.

    The tensors are copied to CPU memory in the calling thread first, because training goes on changing the
    parameters in place. One save is in flight at a time; a new save first waits for the previous one. Pending saves
    finish before a load, at teardown and at interpreter exit, so a save is never lost on a normal exit. An error in
    the background is raised by the next call.

    Args:
        inner: The CheckpointIO that writes (default: the atomic torch one).
    """

    name: ClassVar[str] = "async"

    def __init__(self, inner: CheckpointIO | None = None) -> None:
        self.inner = inner or TorchCheckpointIO()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        _LIVE.add(self)

    @property  # type: ignore[override]
    def checksums(self) -> bool:  # type: ignore[override]
        return self.inner.checksums

    def _snapshot(self, checkpoint: dict[str, Any]) -> dict[str, Any]:
        return apply_to_tensors(checkpoint, lambda t: t.detach().to("cpu", copy=True))

    def _write(self, checkpoint: dict[str, Any], path: PathLike) -> None:
        try:
            self.inner.save_checkpoint(checkpoint, path)
            self.inner.settle()
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            self._error = err

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike) -> None:
        self.wait()
        snapshot = self._snapshot(checkpoint)
        self._thread = threading.Thread(target=self._write, args=(snapshot, path), name="xtrain-async-checkpoint",
                                        daemon=False)
        self._thread.start()

    @override
    def load_checkpoint(self, path: PathLike, *, map_location: Any = "cpu") -> dict[str, Any]:
        self.wait()
        return self.inner.load_checkpoint(path, map_location=map_location)

    @override
    def remove_checkpoint(self, path: PathLike) -> None:
        self.wait()
        self.inner.remove_checkpoint(path)

    @override
    def copy_checkpoint(self, source: PathLike, destination: PathLike) -> None:
        self.wait()
        self.inner.copy_checkpoint(source, destination)

    @override
    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.inner.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    @override
    def teardown(self) -> None:
        """Finish the save in flight, then let the writer underneath stop its own work (its threads)."""
        self.wait()
        self.inner.teardown()

    def pending(self) -> bool:
        """Whether a save is still being written."""
        return self._thread is not None and self._thread.is_alive()
