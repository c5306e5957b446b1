"""Fail-fast across ranks: one small thread per rank, talking through the rendezvous store.

* A rank that raises writes ``abort`` (its rank and traceback) to the store before it exits. The others print that
  traceback and end at once (their abort handler flushes the loggers before any collective error reaches them).
* Every rank bumps its heartbeat counter every ``interval`` seconds and watches one neighbour's counter; a counter
  that stops moving for ``dead_after`` seconds means the neighbour was killed (SIGKILL, OOM) or hung, and the
  watcher writes ``abort`` on its behalf.
* A rank that sees ``abort``, or loses the store (its host process died), prints the failed rank's traceback and
  exits at once with ``os._exit``: its main thread may be blocked in a collective that would otherwise wait for a
  timeout of many minutes.

* A rank whose watchdog thread cannot run at all (C code holding the GIL) looks killed to its neighbour, which
  ends the others; ``faulthandler``'s own timer, re-armed by the thread, then dumps its stacks and exits it too,
  so no frozen process outlives the run (on another node nobody else could end it).
* With ``hang_timeout``, the same thread detects a rank that stopped making progress (``_internal/hang.py``) and
  writes ``abort`` as ``hang``: every rank then prints the stacks of its threads and dataloader workers, reports
  its state, the detecting rank prints one summary (``_internal/hang_end.py``), and every rank exits with code 1.
  The stuck rank records the hang for a restarting launcher (``XTRAIN_FAILURE_DIR``), which then names it rather
  than a rank that lost it.
* A rank stopped by SIGINT (Ctrl-C) or by SIGTERM before training writes ``abort`` as ``interrupt``: that is not a
  failure, so the others say the run was interrupted, print no traceback, and exit with the signal's code (130 or
  143) rather than 1.

This works whoever launched the ranks (xtrain, torchrun, SLURM, mpirun) and across nodes, because it needs nothing
but the store every rank already connects to. Watching one neighbour keeps the store's load constant per rank.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from xtrain.core._internal.hang import HangMonitor
from xtrain.core._internal.hang_end import take_part
from xtrain.core._internal.hang_report import WorkerStacks, end_workers
from xtrain.core._internal.progress_signal import PROGRESS

__all__ = ["ABORT_EXIT_CODE", "INTERRUPT_EXIT_CODES", "Watchdog"]

ABORT_EXIT_CODE = 1
INTERRUPT_EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}  # the shell's 128 + signal number
_ABORT = "abort"
_HANG = "hang"
_INTERRUPT = "interrupt"
_FROZEN_GRACE_S = 30.0
_REARM_S = 5.0
_OWN_END_S = 10.0  # how long a rank that failed itself (Ctrl-C on every rank) may take to end its own run






def _default_dead_after() -> float:
    return float(os.environ.get("XTRAIN_HEARTBEAT_TIMEOUT", "6"))


class Watchdog:
    """Watches the other ranks of one run.

    Args:
        store: A ``torch.distributed.Store`` shared by all ranks (a fresh prefix per run).
        rank: This process's global rank.
        world_size: The number of ranks.
        interval: Seconds between heartbeats and checks.
        dead_after: Seconds without a neighbour heartbeat before it is declared gone.
        on_abort: Called (best effort) before this rank exits because another failed, e.g. to flush logs.
        hang_timeout: Seconds without progress before this rank counts as hung (``None``: no hang detection).
        collective_timeout: The process-group timeout in seconds: the first step's allowance stays below it, so the
            hang report comes before torch's timeout error (``None``: no cap).
        global_step: Returns the training loop's global step (``None`` where there is none, e.g. the Engine), for
            the hang report and a restarting launcher's record.
    """

    def __init__(self, store: Any, *, rank: int, world_size: int, interval: float = 0.5,
                 dead_after: float | None = None, on_abort: Callable[[], None] | None = None,
                 hang_timeout: float | None = None, collective_timeout: float | None = None,
                 global_step: Callable[[], int | None] | None = None) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.interval = interval
        self.dead_after = _default_dead_after() if dead_after is None else dead_after
        self.on_abort = on_abort
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reported = False
        self._own_failure = False
        self.shutting_down = False
        self.hang_timeout = hang_timeout
        self.collective_timeout = collective_timeout
        self._global_step = global_step
        self._hang: HangMonitor | None = None
        self._workers = WorkerStacks()
        self._enabled_faulthandler = False

    def start(self) -> None:
        self.store.add(f"hb/{self.rank}", 1)
        if not faulthandler.is_enabled():
            try:  # a crash in C code (gloo's abort on mismatched collectives, a segfault) prints every stack
                faulthandler.enable(all_threads=True)
                self._enabled_faulthandler = True
            except (RuntimeError, ValueError, OSError):  # stderr without a file descriptor (a notebook)
                pass
        if self.hang_timeout is not None:
            PROGRESS.begin("setup")
            self._hang = HangMonitor(self.store, timeout=self.hang_timeout, thread_id=threading.get_ident(),
                                     now=time.monotonic(), collective_timeout=self.collective_timeout)
            self._workers.install()
        self._thread = threading.Thread(target=self._run, name=f"xtrain-watchdog-rank{self.rank}", daemon=True)
        self._thread.start()

    def begin_shutdown(self) -> None:
        """This rank finished normally and is entering the final barrier.

        From now on, losing the store means rank 0 finished too and exited, not that it crashed. Failures reported
        through ``abort`` or a silent neighbour still end this rank, so nothing hangs in that barrier.
        """
        self.shutting_down = True

    def stop(self) -> None:
        """Stop watching (after the final barrier)."""
        if self._thread is None:
            return
        try:
            self.store.set(f"done/{self.rank}", "1")
        except Exception:  # noqa: BLE001 - the store may already be gone at shutdown
            pass
        self._stop.set()
        self._thread.join(timeout=5 * self.interval + 1)
        self._thread = None
        faulthandler.cancel_dump_traceback_later()
        if self._enabled_faulthandler:  # a rank that goes on after fit (a script under torchrun) gets it back as it was
            faulthandler.disable()
            self._enabled_faulthandler = False
        if self._hang is not None:
            self._hang.close()
            self._hang = None
        self._workers.uninstall()

    @property
    def reported_failure(self) -> bool:
        """Whether this rank reported a failure of its own run (:meth:`report_failure`)."""
        return self._reported

    def report_failure(self, details: str, *, caused_by_peer: bool = False) -> None:
        """Tell every rank that this one failed (first report wins); called before this rank exits.

        Args:
            details: The traceback to show on the other ranks.
            caused_by_peer: The failure is a collective that lost another rank (connection closed): the culprit is
                that rank, not this one. Wait up to the heartbeat timeout for the watcher thread to name it (it
                then exits this process with that rank's report); only if nobody does, report this failure.
        """
        if self._reported:
            return
        self._reported = True
        self._own_failure = not caused_by_peer
        if caused_by_peer and self._thread is not None:
            deadline = time.monotonic() + self.dead_after + 4 * self.interval
            while time.monotonic() < deadline and self._thread.is_alive():
                time.sleep(self.interval / 2)
        try:
            self.store.compare_set(_ABORT, "", f"{self.rank}\n{details}")
        except Exception:  # noqa: BLE001 - the process is failing anyway; nothing more to do
            pass

    def report_interrupt(self, signal_name: str) -> None:
        """Tell every rank that this one was interrupted (``"SIGINT"``: Ctrl-C, ``"SIGTERM"`` before training).

        It is not a failure: the other ranks print one line instead of a traceback and exit with the signal's code,
        so a scheduler that restarts on 143 sees 143, and Ctrl-C ends the job with 130 as in a shell.
        """
        if self._reported:
            return
        self._reported = True
        self._own_failure = True
        try:
            self.store.compare_set(_ABORT, "", f"{_INTERRUPT}\n{self.rank}\n{signal_name}")
        except Exception:  # noqa: BLE001 - the process is stopping anyway; nothing more to do
            pass

    def _arm_freeze_exit(self) -> None:
        """Exit (with every thread's stack) if this thread does not run again for a while; see the module docstring."""
        try:
            faulthandler.dump_traceback_later(self.dead_after + _FROZEN_GRACE_S, exit=True)
        except (RuntimeError, ValueError, OSError):  # stderr without a file descriptor
            pass

    def _run(self) -> None:
        neighbour = (self.rank + 1) % self.world_size
        last_value, last_change = -1, time.monotonic()
        armed = 0.0
        while not self._stop.wait(self.interval):
            try:
                if time.monotonic() - armed > _REARM_S:
                    self._arm_freeze_exit()
                    armed = time.monotonic()
                self.store.add(f"hb/{self.rank}", 1)
                if self.store.check([_ABORT]):
                    self._die(self.store.get(_ABORT).decode(errors="replace"))
                if self._hang is not None and not self.shutting_down:
                    reason = self._hang.poll(time.monotonic())
                    if reason is not None:
                        self.store.compare_set(_ABORT, "", f"{_HANG}\n{self.rank}\n{reason}")
                        self._die(self.store.get(_ABORT).decode(errors="replace"))
                if neighbour == self.rank or self.store.check([f"done/{neighbour}"]):
                    continue
                value = int(self.store.add(f"hb/{neighbour}", 0))
                now = time.monotonic()
                if value != last_value:
                    last_value, last_change = value, now
                elif now - last_change > self.dead_after:
                    message = (f"{neighbour}\nrank {neighbour} is gone: no heartbeat for {now - last_change:.1f} s "
                               f"(killed, crashed without a Python traceback, or frozen).")
                    self.store.compare_set(_ABORT, "", message)
                    self._die(self.store.get(_ABORT).decode(errors="replace"))
            except Exception as err:  # noqa: BLE001 - any store failure means the run is broken
                if self._stop.is_set() or self.shutting_down:
                    faulthandler.cancel_dump_traceback_later()
                    return
                self._die(f"?\nlost contact with the rendezvous store ({type(err).__name__}: {err}); the process "
                          f"hosting it (rank 0, or the launcher's agent) has exited.")

    def _die(self, abort_value: str) -> None:
        failed, _, details = abort_value.partition("\n")
        if failed == _HANG:
            self._end_hung_run(details)
        if failed == _INTERRUPT:
            self._end_interrupted_run(details)
        if failed == str(self.rank):
            return
        if self._own_failure and self._stop.wait(_OWN_END_S):
            return  # this rank failed too and ended its own run (on_exception, teardown, logs) meanwhile
        sys.stderr.write(f"\nxtrain: rank {failed} failed; stopping rank {self.rank} (pid {os.getpid()}).\n"
                         f"----- rank {failed} -----\n{details.rstrip()}\n-------------------\n")
        sys.stderr.flush()
        self._exit()

    def _exit(self, code: int = ABORT_EXIT_CODE) -> NoReturn:
        """Run the abort handler (best effort), end the dataloader workers and leave with ``code``."""
        if self.on_abort is not None:
            try:
                self.on_abort()
            except Exception:  # noqa: BLE001 - exiting regardless
                pass
        end_workers()
        os._exit(code)

    def _end_interrupted_run(self, details: str) -> None:
        """Another rank was interrupted: say so (no traceback, it is not a failure) and exit with the signal's code."""
        rank, _, signal_name = details.partition("\n")
        if rank == str(self.rank):
            return
        if self._own_failure and self._stop.wait(_OWN_END_S):
            return  # interrupted too (Ctrl-C reaches every rank) and ended its own run meanwhile
        what = "KeyboardInterrupt (SIGINT, Ctrl-C)" if signal_name == "SIGINT" else signal_name
        sys.stderr.write(f"\nxtrain: detected {what} on rank {rank}: the run was interrupted, not failed; "
                         f"stopping rank {self.rank} (pid {os.getpid()}).\n")
        sys.stderr.flush()
        self._exit(INTERRUPT_EXIT_CODES.get(signal_name, ABORT_EXIT_CODE))

    def _step(self) -> int | None:
        if self._global_step is None:
            return None
        try:
            return self._global_step()
        except Exception:  # noqa: BLE001 - the trainer may be half set up; the report goes on without it
            return None

    def _end_hung_run(self, details: str) -> None:
        """Take part in the hang report (stacks, state), let the detecting rank print the summary, then exit."""
        reporter, _, reason = details.partition("\n")
        try:
            take_part(self.store, rank=self.rank, world_size=self.world_size, reporter=int(reporter), reason=reason,
                      monitor=self._hang, workers=self._workers, global_step=self._step(),
                      hang_timeout=self.hang_timeout or 0.0, poll=self.interval / 5)
        except Exception:  # noqa: BLE001 - the reporter exited and took the store along: we are done too
            pass
        finally:
            self._exit()
