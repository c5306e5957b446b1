"""What a hang report says: every thread's stack of every rank (and of its dataloader workers), and one summary.

Stacks come from :mod:`faulthandler`, which reads the frames of a thread blocked in C code (a collective, a sleep,
a queue) without its help. Dataloader workers are forked after the watchdog registered a faulthandler dump on
``SIGUSR2`` into a private file, so they inherit it: the rank signals each worker and reads its stack back, even
while the worker is blocked forever in the user's ``__getitem__``. Each rank prints its own block, headed by rank,
host and pid; the rank that detected the hang gathers every rank's short report through the store and prints the
summary: which rank stopped, for how long, its innermost frame of user code, and what the others wait in.
"""

from __future__ import annotations

import faulthandler
import json
import multiprocessing
import os
import re
import signal
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from typing import IO, Any

from xtrain.core._internal.progress_signal import PROGRESS, ProgressSignal

__all__ = ["ThreadState", "WorkerStacks", "end_workers", "format_summary", "gather_reports", "is_library",
           "main_thread_state", "publish_report", "rank_report", "stack_block", "stuck_ranks", "summary_done",
           "wait_for_summary", "where", "write_block"]

_WORKER_SIGNAL = getattr(signal, "SIGUSR2", None)
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<name>\S+)')


@dataclass(frozen=True)
class ThreadState:
    """Where the training thread is: ``waiting`` names what it waits in for other ranks (``None``: it does not)."""

    waiting: str | None
    doing: str
    user_frame: str | None


@cache
def _library_prefixes() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    prefixes = {os.path.realpath(paths[key]) + os.sep for key in ("stdlib", "platstdlib", "purelib", "platlib")
                if key in paths}
    import xtrain

    prefixes.update(os.path.realpath(p) + os.sep for p in xtrain.__path__)
    return tuple(sorted(prefixes))


def is_library(filename: str) -> bool:
    """Whether ``filename`` belongs to Python, an installed package or xtrain (not the user's code)."""
    return filename.startswith("<") or os.path.realpath(filename).startswith(_library_prefixes())


def _waits_in(filename: str, name: str) -> str | None:
    path = filename.replace(os.sep, "/")
    if "/torch/distributed/" in path:
        return f"torch.distributed {name}"
    if "/torch/autograd/" in path:
        return "backward (the gradient all-reduce)"
    if "/horovod/" in path:
        return f"horovod {name}"
    return None


def main_thread_state(thread_id: int, signal_: ProgressSignal) -> ThreadState:
    """Classify the training thread from its Python frames and the collective it is in (call with the GIL)."""
    frame = sys._current_frames().get(thread_id)
    frames: list[tuple[str, int, str]] = []
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    user = next((f"{file}:{line} in {name}" for file, line, name in frames if not is_library(file)), None)
    waiting: str | None = None
    if signal_.depth > 0:
        waiting = f"{signal_.collective_name} (collective #{signal_.collectives} xtrain entered)"
    else:
        for file, _, name in reversed(frames):  # outermost first: torch.distributed.all_reduce, not its helpers
            waiting = _waits_in(file, name)
            if waiting is not None:
                break
    if waiting is not None:
        doing = f"waiting in {waiting}"
    elif any("/torch/utils/data/" in file.replace(os.sep, "/") for file, _, _ in frames):
        doing = "waiting for a batch from its DataLoader"
    elif frames:
        file, line, name = frames[0]
        doing = f"running {name} ({file}:{line})"
    else:
        doing = "not running Python code"
    return ThreadState(waiting, doing, user)


class WorkerStacks:
    """Lets this rank read the stacks of its (forked) dataloader workers; see the module docstring."""

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None

    def install(self) -> None:
        if _WORKER_SIGNAL is None or signal.getsignal(_WORKER_SIGNAL) is not signal.SIG_DFL:
            return  # the user handles SIGUSR2 themselves: leave it alone
        self._file = tempfile.TemporaryFile(prefix="xtrain-stacks-")  # noqa: SIM115 - closed in uninstall
        faulthandler.register(_WORKER_SIGNAL, file=self._file, all_threads=True)

    def uninstall(self) -> None:
        if self._file is not None and _WORKER_SIGNAL is not None:
            faulthandler.unregister(_WORKER_SIGNAL)
            self._file.close()
            self._file = None

    def collect(self, wait: float = 1.0) -> list[tuple[int, str]]:
        """Each live worker's pid and stack dump (empty where it did not answer within ``wait`` seconds)."""
        found = []
        for child in multiprocessing.active_children():
            pid = child.pid
            if pid is None:
                continue
            text = ""
            if self._file is not None and _WORKER_SIGNAL is not None:
                fd = self._file.fileno()
                start = os.fstat(fd).st_size
                try:
                    os.kill(pid, _WORKER_SIGNAL)
                except OSError:
                    continue
                deadline, size = time.monotonic() + wait, start
                while time.monotonic() < deadline:
                    time.sleep(0.1)
                    now = os.fstat(fd).st_size
                    if now > start and now == size:
                        break
                    size = now
                text = os.pread(fd, size - start, start).decode(errors="replace")
            found.append((pid, text))
        return found


def end_workers() -> None:
    """SIGKILL this process's multiprocessing children (dataloader workers), which a blocked worker would outlive."""
    for child in multiprocessing.active_children():
        if child.pid is not None:
            try:
                os.kill(child.pid, signal.SIGKILL)
            except OSError:
                pass


def innermost_user_frame(dump: str) -> str | None:
    """The innermost frame of user code in a faulthandler dump (most recent call first)."""
    for match in _FRAME.finditer(dump):
        if not is_library(match["file"]):
            return f"{match['file']}:{match['line']} in {match['name']}"
    return None


def stack_block(rank: int, host: str, workers: list[tuple[int, str]]) -> str:
    """This rank's block: every thread's stack, then each dataloader worker's, under one header."""
    with tempfile.TemporaryFile() as f:
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.seek(0)
        own = f.read().decode(errors="replace")
    parts = [f"\n===== xtrain hang report: stacks of rank {rank} (host {host}, pid {os.getpid()}), every thread, "
             f"most recent call first =====\n{own}"]
    for pid, text in workers:
        parts.append(f"----- dataloader worker of rank {rank} (host {host}, pid {pid}) -----\n"
                     f"{text or '(no answer)'}\n")
    parts.append(f"===== end of rank {rank} =====\n")
    return "".join(parts)


def write_block(text: str) -> None:
    """Write ``text`` to stderr in as few system calls as possible, so ranks sharing a terminal do not interleave."""
    data = text.encode(errors="replace")
    try:
        sys.stderr.flush()
        fd = sys.stderr.fileno()
        while data:
            data = data[os.write(fd, data):]
    except (OSError, ValueError, AttributeError):
        sys.stderr.write(text)
        sys.stderr.flush()


def rank_report(rank: int, host: str, *, state: ThreadState | None, stalled: float,
                workers: list[tuple[int, str]], global_step: int | None = None) -> dict[str, Any]:
    """What this rank tells the reporter (JSON-ready): where its training thread is and what it last did."""
    return {"rank": rank, "host": host, "pid": os.getpid(), "stalled": stalled, "phase": PROGRESS.phase,
            "steps": PROGRESS.steps, "phase_steps": PROGRESS.phase_steps, "global_step": global_step,
            "waiting": state.waiting if state else None,
            "doing": state.doing if state else "unknown (hang detection is off on this rank)",
            "user_frame": state.user_frame if state else None, "collective": PROGRESS.collective_name,
            "collectives": PROGRESS.collectives, "in_collective": PROGRESS.depth > 0,
            "workers": [{"pid": pid, "frame": innermost_user_frame(text)} for pid, text in workers]}


def publish_report(store: Any, rank: int, report: dict[str, Any]) -> None:
    """Hand this rank's report to the reporter through the store."""
    store.set(f"hang/{rank}", json.dumps(report))


def gather_reports(store: Any, world_size: int, *, within: float, poll: float) -> dict[int, dict[str, Any]]:
    """The reports the ranks published within ``within`` seconds (a frozen rank publishes none)."""
    deadline = time.monotonic() + within
    reports: dict[int, dict[str, Any]] = {}
    while True:
        for r in range(world_size):
            if r not in reports and store.check([f"hang/{r}"]):
                reports[r] = json.loads(store.get(f"hang/{r}").decode(errors="replace"))
        if len(reports) == world_size or time.monotonic() >= deadline:
            return reports
        time.sleep(poll)


def summary_done(store: Any) -> None:
    """Tell the other ranks the summary is printed (they may exit: the store may go with the reporter)."""
    store.set("hang/done", "1")


def wait_for_summary(store: Any, *, within: float, poll: float) -> None:
    """Wait up to ``within`` seconds for the reporter's summary, so this rank's exit does not cut it short."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and not store.check(["hang/done"]):
        time.sleep(poll)


def where(report: dict[str, Any]) -> str:
    """The loop position of a rank's report: the global step, and the batches done when it evaluates.

    Counted steps of every loop (sanity check and validation batches included) would not match ``global_step``.
    """
    phase, batch, step = report["phase"], report.get("phase_steps"), report.get("global_step")
    at_step = f"global step {step}" if step is not None else None
    if phase == "setup":
        return "in setup" + (f" (at {at_step})" if at_step else "")
    if phase == "train" and at_step:
        return f"in train at {at_step}"
    if batch is None:
        return f"in {phase} after {report['steps']} steps"
    return f"in {phase} after {batch} batches" + (f" ({at_step})" if at_step else "")


def _rank_line(report: dict[str, Any]) -> str:
    who = f"rank {report['rank']} (host {report['host']}, pid {report['pid']})"
    line = f"{who}: no progress for {report['stalled']:.1f} s, {where(report)}; {report['doing']}"
    if report.get("user_frame"):
        line += f"; innermost user code: {report['user_frame']}"
    if "DataLoader" in report["doing"]:
        for worker in report.get("workers", []):
            line += f"; dataloader worker pid {worker['pid']} at {worker['frame'] or 'an unknown place'}"
    if report["collectives"]:
        state = "still inside" if report["in_collective"] else "returned"
        line += f". Last collective xtrain entered: #{report['collectives']} {report['collective']} ({state})"
    return line


_EVERY_RANK_CALLS = ("barrier('engine.save')", "barrier('engine.load')")


def stuck_ranks(reports: dict[int, dict[str, Any]]) -> list[int]:
    """The ranks that are not waiting for other ranks (the culprits of a hang)."""
    return [r for r in sorted(reports) if reports[r]["waiting"] is None]


def format_summary(reports: dict[int, dict[str, Any]], *, world_size: int, reporter: int, reason: str,
                   timeout: float) -> str:
    """The one summary: stuck ranks first, then the ranks waiting for them, then ranks that did not answer."""
    stuck = stuck_ranks(reports)
    waiting = [r for r in sorted(reports) if reports[r]["waiting"] is not None]
    lines = ["", "=" * 100,
             f"xtrain: HANG DETECTED by rank {reporter}: {reason} (hang_timeout={timeout:g} s).",
             f"Stuck (not waiting for other ranks): {', '.join(f'rank {r}' for r in stuck) or 'none'}"]
    lines += [f"  STUCK   {_rank_line(reports[r])}" for r in stuck]
    lines += [f"  waiting {_rank_line(reports[r])}" for r in waiting]
    missing = [r for r in range(world_size) if r not in reports]
    lines += [f"  rank {r}: no report (frozen, or a C call holds its GIL; it is ended with the others)"
              for r in missing]
    if not stuck and waiting:
        entered = "; ".join(f"rank {r} in {reports[r]['waiting']}" for r in waiting)
        lines.append(f"Every rank waits in a collective, and they do not match (one that only some ranks call, or "
                     f"calls in another order): {entered}.")
        calls = {str(reports[r]["waiting"]).split(" (collective #")[0] for r in waiting}
        alone = sorted(calls & set(_EVERY_RANK_CALLS))
        if alone and len(calls) > 1:
            lines.append(f"{', '.join(alone)} waits for every rank: call engine.save/engine.load on every rank, not "
                         "under `if engine.is_global_zero:` (Accelerate's save(obj, f) is one rank's torch.save; "
                         "for that, call torch.save there).")
    lines += ["Every thread's stack of each rank is printed above, under 'xtrain hang report: stacks of rank N'.",
              "Every rank now exits with code 1. Raise hang_timeout (Trainer/Engine argument) if this step is just "
              "slow.", "=" * 100, ""]
    return "\n".join(lines)
