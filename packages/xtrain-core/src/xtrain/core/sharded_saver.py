"""Writing sharded checkpoints from every rank, synchronously or in the background, with the manifest last.

Strategies that shard (FSDP, and any third-party one) save through :class:`ShardedSaver`; the directory layout
and reading live in :mod:`xtrain.core.sharded_checkpoint`. Every rank writes its own shards with
``torch.distributed.checkpoint``; rank 0 writes the non-tensor rest and, only after every rank's shards are on
disk, the manifest that makes the checkpoint complete.

With ``async_save`` the tensors are copied to CPU memory (``dcp.async_save`` stages them) and training continues
while a background thread writes them; the manifest is written when the write has finished on every rank. The
background write talks over its own gloo process group, so its collectives never interleave with training's. One
save is in flight at a time; it is finished before the next save, before a load, at teardown and at interpreter
exit, so a save is never lost on a normal exit. A crash mid-write leaves the previous checkpoint untouched.
"""

from __future__ import annotations

import atexit
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xtrain.core._internal.integrity import HashingStream
from xtrain.core._internal.progress_signal import report_stream_writes
from xtrain.core.checkpoint_io import PathLike
from xtrain.core.defaults.torch_io import checkpoint_bytes, disk_full, out_of_room, save_file, torch_crc32
from xtrain.core.sharded_checkpoint import (
    REST_FILE,
    make_room_for_directory,
    new_data_name,
    remove_checkpoint_path,
    remove_stale_data,
    split_tensors,
    write_manifest,
)

if TYPE_CHECKING:
    from xtrain.core.strategy import Strategy

__all__ = ["ShardedSaver"]


@dataclass
class _Job:
    target: Path
    manifest: dict[str, Any]
    data: str
    aside: Path | None
    sums: dict[str, list[int]] | None
    actions: list[Callable[[], None]] = field(default_factory=list)
    done: bool = False


def _writer(directory: Path, sums: dict[str, list[int]] | None) -> Any:
    """DCP's file writer; with ``sums``, every file it writes is checksummed on its way to disk (not read back)."""
    from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemWriter

    writer = FileSystemWriter(str(directory))
    if sums is None:
        return writer
    record = sums

    class HashingFileSystem(FileSystem):
        @contextmanager
        def create_stream(self, path: Any, mode: str) -> Iterator[Any]:
            with super().create_stream(path, mode) as stream:
                if "w" not in mode:
                    yield stream
                    return
                hashed = HashingStream(stream)  # type: ignore[arg-type]
                yield hashed
            record[Path(path).name] = [hashed.crc, hashed.size]

        def rename(self, path: Any, new_path: Any) -> None:
            super().rename(path, new_path)
            if Path(path).name in record:
                record[Path(new_path).name] = record.pop(Path(path).name)

    writer.fs = HashingFileSystem()
    return writer


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


class ShardedSaver:
    """Saves checkpoint dicts as sharded checkpoint directories for a process-group strategy.

    Args:
        strategy: The strategy whose ranks save together (its ``broadcast`` and ``is_global_zero`` are used).
        async_save: Write in the background (see the module docstring).
    """

    def __init__(self, strategy: Strategy, *, async_save: bool = False) -> None:
        self._strategy = strategy
        self.async_save = async_save
        self._group: Any = None
        self._thread: threading.Thread | None = None
        self._job: _Job | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._registered = False

    def setup(self) -> None:
        """Create the background write's process group; every rank calls it once the default group exists."""
        if self.async_save and self._group is None and _distributed():
            import torch.distributed as dist

            self._group = dist.new_group(backend="gloo")
        if not self._registered:
            # Registered after the process group was created, so it runs before the group is destroyed at exit.
            atexit.register(self.wait)
            self._registered = True

    def save(self, checkpoint: dict[str, Any], path: PathLike) -> None:
        """Write ``checkpoint`` to the directory ``path``; every rank calls it with its own shards."""
        from torch.distributed.checkpoint.state_dict_saver import async_save, save

        self.wait()
        strategy, target = self._strategy, Path(path)
        zero = strategy.is_global_zero
        aside = None
        if zero:
            aside = make_room_for_directory(target)  # a single-file checkpoint from another strategy
            target.mkdir(parents=True, exist_ok=True)
            remove_stale_data(target)
        # The broadcast also orders rank 0's clean-up before any rank writes into the new data directory.
        data = strategy.broadcast(new_data_name() if zero else "")
        tensors, rest = split_tensors({k: v for k, v in checkpoint.items() if k != "xtrain"})
        sums: dict[str, list[int]] | None = {} if strategy.checkpoint_io.checksums else None
        job = _Job(target, dict(checkpoint.get("xtrain", {})), data, aside, sums)
        if zero:
            (target / data).mkdir(parents=True, exist_ok=True)
            # Not sealed: the manifest's checksum list covers it, like every other file of the directory.
            written = save_file(rest, target / data / REST_FILE, checksums=False)
            if sums is not None:
                sums[REST_FILE] = list(written)
        writer = report_stream_writes(_writer(target / data, sums))
        alone = not _distributed()  # one process without a group (single device): nothing to coordinate
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
            if not self.async_save:
                try:
                    with torch_crc32(enabled=False):  # xtrain's file checksums cover every byte, faster
                        save(tensors, storage_writer=writer, no_dist=alone)
                except BaseException as err:  # noqa: BLE001 - cleaned up, then raised again
                    self._abandon(job, err, checkpoint_bytes(tensors))
                if sums is not None and not alone:
                    job.sums = _merge(strategy.all_gather_object(sums))
                self._commit(job)
                return
            future = async_save(tensors, storage_writer=writer, process_group=self._group, no_dist=alone)
        self._job = job
        self._thread = threading.Thread(target=self._finish, args=(job, future), name="xtrain-sharded-save")
        self._thread.start()

    def _finish(self, job: _Job, future: Any) -> None:
        import torch.distributed as dist

        try:
            result = future.result()
            if hasattr(result, "upload_completion"):  # newer torch: an AsyncSaveResponse
                result.upload_completion.result()
            if job.sums is not None and _distributed():
                gathered: list[Any] = [None] * dist.get_world_size(self._group)
                dist.all_gather_object(gathered, job.sums, group=self._group)
                job.sums = _merge(gathered)
            self._commit(job)
            if _distributed():
                # Rank 0 commits the manifest: no rank's wait() may return (and a load begin) before it has.
                dist.barrier(group=self._group)
        except BaseException as err:  # noqa: BLE001 - re-raised in the training thread by wait()
            self._error = err

    def _abandon(self, job: _Job, err: BaseException, needed: int) -> None:
        """A failed write: remove its data directory (the manifest still names the previous one) and raise."""
        import shutil

        if self._strategy.is_global_zero:
            shutil.rmtree(job.target / job.data, ignore_errors=True)
        if out_of_room(err):
            raise disk_full(job.target, err, needed) from err
        raise err

    def _commit(self, job: _Job) -> None:
        """Rank 0: point the manifest at the finished data, drop older data, then run what waited for it."""
        if self._strategy.is_global_zero:
            write_manifest(job.target, job.manifest, job.data, job.sums)
            remove_stale_data(job.target)
            if job.aside is not None:
                remove_checkpoint_path(job.aside)
        with self._lock:
            job.done = True
            actions, job.actions = job.actions, []
        for action in actions:
            action()

    def when_written(self, path: PathLike, action: Callable[[], None]) -> None:
        """Run ``action`` once the checkpoint at ``path`` is complete: now, or after the pending save commits it.

        Lets ``last.ckpt`` be copied from a checkpoint still being written without blocking training.
        """
        with self._lock:
            job = self._job
            if job is not None and not job.done and job.target == Path(path):
                job.actions.append(action)
                return
        action()

    def pending(self, path: PathLike | None = None) -> bool:
        """Whether a save (to ``path``, when given) is still being written."""
        job = self._job
        return job is not None and not job.done and (path is None or job.target == Path(path))

    def wait(self) -> None:
        """Block until the pending save is complete; raise what went wrong in the background."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self._job = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def _merge(per_rank: list[Any]) -> dict[str, list[int]]:
    merged: dict[str, list[int]] = {}
    for sums in per_rank:
        merged.update(sums)
    return merged
