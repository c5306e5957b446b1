"""Restarting a failed group (``Trainer(max_restarts=N)`` with xtrain's own launcher).

With restarts on, the calling process does not train: it becomes a supervisor that starts every local rank
(rank 0 included) as a copy of its command, watches them, and when one fails ends them all and starts the group
again, up to ``max_restarts`` times. Every attempt gets the same run identity (``XTRAIN_RUN_ID``), so
``ckpt_path="auto"`` finds the checkpoints the previous attempt wrote. The supervisor then exits with the group's
code, so the code after ``fit`` runs in rank 0's process, not twice.

A failure is described by the failed rank's record (its step and exception, written by the Trainer) or by the
signal that killed it. When two failures in a row are the same (same step and error, or the same signal with no
newer checkpoint between them), retrying cannot help: the supervisor stops early and says the failure is
deterministic. Errors are compared without what changes between attempts of one failure (addresses, ports, pids,
durations: gloo's "Connection closed by peer [127.0.0.1]:9140" gets a new port every attempt). A hang is recorded by
the rank the hang report calls stuck, and that rank is named, not a rank whose collective failed when it was ended.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import NoReturn

from xtrain.core.restarts import (
    FAILURE_DIR_ENV,
    RESTART_COUNT_ENV,
    RUN_ID_ENV,
    FailureRecord,
    read_failure,
    run_identity,
)
from xtrain.strategies._internal.pdeathsig import preexec_die_with_parent

__all__ = ["Failure", "normalized_error", "supervise"]

_POLL_S = 0.05
_SETTLE_S = 0.5  # after the first failure, how long other ranks may take to report theirs before the cause is chosen
_HANG_PREFIX = "Hang: "  # the error a hung rank records (xtrain.core._internal.watchdog)
_VARYING = (
    re.compile(r"\[?(?:\d{1,3}\.){3}\d{1,3}\]?(?::\d+)?"),  # IPv4 address, optional port
    re.compile(r"\[[0-9a-fA-F:]*:[0-9a-fA-F:.]*\](?::\d+)?"),  # [IPv6]:port
    re.compile(r"0x[0-9a-fA-F]+"),  # addresses of objects
    re.compile(r"(?<![\w.])\d{4,}(?:\.\d+)?(?![\w.])"),  # ports, pids, timestamps
    re.compile(r"\d+\.\d+ ?(?:m?s|seconds?)\b"),  # measured durations
)


def normalized_error(error: str) -> str:
    """``error`` without what differs between attempts of the same failure: addresses, ports, pids (numbers of 4
    digits or more), hex object addresses and measured durations. Small numbers (a step, a rank, a shape) stay:
    ``"attempt 1"`` and ``"attempt 2"`` are different failures."""
    for pattern in _VARYING:
        error = pattern.sub("#", error)
    return error


@dataclass(frozen=True)
class Failure:
    """One attempt's failure: which rank, how, and the code to exit with if it is the last one."""

    rank: int
    code: int
    signal_name: str | None
    record: FailureRecord | None

    @property
    def cause(self) -> str:
        if self.signal_name:
            return f"killed by {self.signal_name}"
        error = self.record.error if self.record and self.record.error else "no Python error recorded"
        return f"exited with code {self.code} ({error})"

    @property
    def step(self) -> int | None:
        return self.record.step if self.record else None

    def signature(self) -> tuple[object, ...] | None:
        """What makes two failures the same, or ``None`` when too little is known to say so."""
        record = self.record
        if self.signal_name:
            start = record.start_step if record else None
            return None if start is None else ("signal", self.signal_name, start)
        if record is None or record.step is None or not record.error:
            return None
        return ("error", record.step, normalized_error(record.error))

    def describe(self) -> str:
        where = f" at step {self.step}" if self.step is not None else (
            f" (attempt started at step {self.record.start_step})" if self.record and self.record.start_step
            is not None else "")
        return f"rank {self.rank} {self.cause}{where}"


def supervise(*, command: list[str], num_processes: int, max_restarts: int, base_env: Mapping[str, str],
              child_env: Callable[[int], dict[str, str]], global_rank: Callable[[int], int],
              new_port: Callable[[], int], run_name: str | None = None) -> NoReturn:
    """Run the group until it succeeds or ``max_restarts`` restarts are spent; exit with its code.

    ``run_name`` (``Trainer(run_name=...)``) names the run in the log as the ranks name it: they prefer it to the
    ``XTRAIN_RUN_ID`` exported here.
    """
    identity = run_identity(run_name)
    run_id = identity.name if identity else f"restart-group-{uuid.uuid4().hex[:12]}"
    folder = tempfile.mkdtemp(prefix="xtrain-restarts-")
    stopping: list[int] = []
    procs: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, frame: FrameType | None) -> None:  # preemption: the ranks checkpoint and stop
        stopping.append(signum)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(signum, forward)
    previous: Failure | None = None
    _say(f"restarts on (max_restarts={max_restarts}); run id {run_id!r}")
    code = 1
    try:
        for attempt in range(max_restarts + 1):
            for stale in Path(folder).iterdir():
                stale.unlink()
            env = {**base_env, RUN_ID_ENV: run_id, RESTART_COUNT_ENV: str(attempt), FAILURE_DIR_ENV: folder}
            if attempt:
                env["MASTER_PORT"] = str(new_port())
            procs[:] = [subprocess.Popen(command, env={**env, **child_env(local)}, preexec_fn=preexec_die_with_parent())
                        for local in range(num_processes)]
            failure = _watch(procs, folder, global_rank)
            if failure is None:
                code = 0
                break
            code = failure.code
            if stopping:
                _say(f"stopped by {signal.Signals(stopping[0]).name}; {failure.describe()}; not restarting")
                break
            if previous is not None and failure.signature() is not None and \
                    failure.signature() == previous.signature():
                _say(f"{failure.describe()}, the same failure as the previous attempt: it is deterministic, so "
                     f"restarting cannot help; stopping after {attempt} restart(s) instead of {max_restarts}. "
                     f"Fix the error above (or resume by hand from the last checkpoint once it is fixed).")
                break
            if attempt == max_restarts:
                _say(f"{failure.describe()}; no restarts left (max_restarts={max_restarts}): giving up with exit "
                     f"code {code}")
                break
            _say(f"{failure.describe()}; ended the other ranks; restart {attempt + 1} of {max_restarts}")
            previous = failure
    except KeyboardInterrupt:
        code = 130
    finally:
        _end(procs)
        shutil.rmtree(folder, ignore_errors=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _watch(procs: list[subprocess.Popen[bytes]], folder: str, global_rank: Callable[[int], int]) -> Failure | None:
    """Wait for the group: ``None`` when every rank succeeded, else the failure that caused the others."""
    while True:
        codes = [proc.poll() for proc in procs]
        if all(code == 0 for code in codes):
            return None
        if any(code not in (None, 0) for code in codes):
            break
        time.sleep(_POLL_S)
    deadline = time.monotonic() + _SETTLE_S
    while time.monotonic() < deadline and any(proc.poll() is None for proc in procs):
        time.sleep(_POLL_S)
    codes = [proc.poll() for proc in procs]
    _end(procs)
    first_code = next(code for code in codes if code not in (None, 0))
    candidates = []
    for local, code in enumerate(codes):
        rank = global_rank(local)
        record = read_failure(folder, rank)
        name = signal.Signals(-code).name if code is not None and code < 0 else None
        has_error = record is not None and bool(record.error)
        if code in (None, 0) and not has_error:
            continue
        written = _mtime(Path(folder) / f"rank{rank}.json") if has_error else float("inf")
        exit_code = first_code if code in (None, 0) else code
        assert exit_code is not None
        # A rank killed by a signal is a cause, then a rank the hang report found stuck; otherwise the first to
        # record an error (the others then failed in a collective with it, or were ended by the fail-fast
        # watchdog), even if it is still tearing down.
        hung = has_error and record is not None and record.error.startswith(_HANG_PREFIX)
        candidates.append(((0 if name else 1 if hung else 2, written, local),
                           Failure(rank, 128 - exit_code if exit_code < 0 else exit_code, name, record)))
    return min(candidates, key=lambda item: item[0])[1]


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return float("inf")


def _end(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            try:
                proc.kill()
            except OSError:
                pass
    for proc in procs:
        proc.wait()


def _say(message: str) -> None:
    sys.stderr.write(f"xtrain launcher: {message}\n")
    sys.stderr.flush()
