"""TensorBoard event files written in the caller's thread.

``SummaryWriter`` hands every event to a writer thread. Serializing an event takes that thread tens of microseconds
of Python, but while the training thread keeps releasing and retaking the GIL around each torch op, the two threads
hand the GIL back and forth: on a 2-core VM the steps around a logged one took about 0.6 ms longer in all (3% of
a tiny model's training time at ``log_every_n_steps=50``). Writing the record into a file here costs about 20 us and wakes no thread. Each event is handed to the operating system as it is added (one
write call), so a process killed right after a checkpoint keeps every event logged before it, as the threaded
writer did.

Each record carries two CRC-32C checksums. TensorBoard's own writer computes them in pure Python, a loop per byte,
most of the 71 us an event of 21 scalars took (30 us in all with them computed in C). With ``google-crc32c``
(installed with the ``tensorboard`` extra) they are computed in C; without it, by TensorBoard's function.

:class:`EventFile` has the interface ``torch.utils.tensorboard``'s ``FileWriter`` expects of its event writer;
:class:`SyncSummaryWriter` is a ``SummaryWriter`` whose default file goes through one, so every ``SummaryWriter``
method (images, histograms, graphs, hparams) keeps working and writes into the same file.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from tensorboard.compat.proto.event_pb2 import Event, SessionLog, SourceMetadata
from torch.utils.tensorboard.writer import FileWriter, SummaryWriter

__all__ = ["EventFile", "SyncSummaryWriter", "crc32c", "file_writer", "record"]

_UIDS = itertools.count()


def _crc32c() -> Callable[[bytes], int]:
    try:
        import google_crc32c

        if google_crc32c.implementation == "c":  # its fallback is a pure-Python loop too
            return google_crc32c.value  # type: ignore[no-any-return]
    except ImportError:
        pass
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c as python_crc32c

    return python_crc32c  # type: ignore[no-any-return]


crc32c = _crc32c()


def _masked(data: bytes) -> bytes:
    crc = crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def record(data: bytes) -> bytes:
    """``data`` framed as a TFRecord: its length, the length's masked CRC-32C, the data, the data's masked CRC."""
    header = struct.pack("<Q", len(data))
    return header + _masked(header) + data + _masked(data)


class EventFile:
    """One event file in ``logdir``, named as TensorBoard names them plus ``.xtrain`` (never one that exists).

    The mark matters: ``SummaryWriter`` numbers its files per process from 0 and opens them without checking, so a
    user's own writer made in the same directory within the same second would otherwise truncate this file.
    """

    def __init__(self, logdir: str, *, filename_suffix: str = "") -> None:
        self._logdir = logdir
        self._suffix = filename_suffix
        self._lock = threading.Lock()
        self._file: Any = None
        self.reopen()

    def get_logdir(self) -> str:
        return self._logdir

    def reopen(self) -> None:
        """Start a new file (after :meth:`close`); does nothing while one is open."""
        if self._file is not None:
            return
        os.makedirs(self._logdir, exist_ok=True)
        stem = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}"
        while True:
            try:
                # Zero-padded: TensorBoard reads a directory's files in name order, and within one second ".10." sorted
                # before ".9." put a resumed run's events before the ones it replaces.
                self._file = open(os.path.join(self._logdir, f"{stem}.{next(_UIDS):08d}.xtrain{self._suffix}"), "xb")  # noqa: SIM115
                break
            except FileExistsError:
                continue
        self.add_event(Event(wall_time=time.time(), file_version="brain.Event:2",
                             source_metadata=SourceMetadata(writer="xtrain")))

    def add_event(self, event: Event) -> None:
        data = record(event.SerializeToString())
        with self._lock:
            if self._file is None:
                raise ValueError(f"the event file in {self._logdir} is closed")
            self._file.write(data)
            self._file.flush()

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()
                self._file.close()
            self._file = None


def file_writer(log_dir: str, *, filename_suffix: str) -> FileWriter:
    """A ``FileWriter`` whose events go through an :class:`EventFile` (no writer thread)."""
    writer = FileWriter.__new__(FileWriter)  # its __init__ would start the thread this module avoids
    writer.event_writer = EventFile(str(log_dir), filename_suffix=filename_suffix)
    return writer


class SyncSummaryWriter(SummaryWriter):
    """A ``SummaryWriter`` that writes its default event file in the caller's thread (see the module's docstring).

    ``add_scalars`` (plural) still makes ordinary writers for its sub-directories.
    """

    def _get_file_writer(self) -> FileWriter:
        # As SummaryWriter's own: (re)create the default writer, and start it with the purge marker when resuming.
        writer: FileWriter | None = self.file_writer
        if self.all_writers is None or writer is None:
            writer = file_writer(self.log_dir, filename_suffix=self.filename_suffix)
            self.file_writer = writer  # type: ignore[assignment]  # torch declares it as None until set
            self.all_writers = {writer.get_logdir(): writer}  # type: ignore[assignment]
            if self.purge_step is not None:
                writer.add_event(Event(step=self.purge_step, file_version="brain.Event:2"))
                writer.add_event(Event(step=self.purge_step, session_log=SessionLog(status=SessionLog.START)))
                self.purge_step = None
        return writer
