"""One worker thread per tracker logger, so talking to a tracking service never blocks the step loop.

Calls are queued in order and run on a daemon thread; :meth:`BackgroundWriter.flush` waits until everything queued
so far has run. A call that fails does not stop the ones after it: the first failure is kept and re-raised by the
next ``flush`` in the caller's thread, so a broken tracker is reported instead of silently dropping metrics.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["BackgroundWriter"]


class BackgroundWriter:
    """Runs submitted calls in order on a worker thread started on first use.

    Args:
        name: The thread's name (shows in stack dumps).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...]] | None] | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)``; returns at once."""
        if self._queue is None:
            self._queue = queue.Queue()
            self._thread = threading.Thread(target=self._work, args=(self._queue,), name=self._name, daemon=True)
            self._thread.start()
        self._queue.put((fn, args))

    def _work(self, jobs: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...]] | None]) -> None:
        while True:
            job = jobs.get()
            try:
                if job is None:
                    return
                fn, args = job
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller by flush()
                if self._error is None:
                    self._error = exc
            finally:
                jobs.task_done()

    def flush(self) -> None:
        """Wait for every queued call; re-raise the first failure since the last flush."""
        if self._queue is not None:
            self._queue.join()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self) -> None:
        """Run what is queued, then stop the thread (a later :meth:`submit` starts a new one)."""
        jobs, thread = self._queue, self._thread
        if jobs is None or thread is None:
            return
        jobs.put(None)
        thread.join()
        self._queue = self._thread = None
        self.flush()

    def __getstate__(self) -> dict[str, Any]:
        """A logger pickled to spawned workers carries no thread (each process starts its own when it logs)."""
        return {"_name": self._name, "_queue": None, "_thread": None, "_error": None}
