"""Hang detection: when a rank stops making progress, decided in its watchdog thread from the progress signal.

Every half second the watchdog thread samples :data:`~xtrain.core._internal.progress_signal.PROGRESS` and keeps
the clock of its last change, so the step path never reads a clock. A rank is hung when it made no progress for
``hang_timeout`` seconds (the first step of each kind of loop, which compiles and warms up dataloaders, gets
:data:`FIRST_STEP_FACTOR` times as long, but never more than the process-group timeout less a margin, see
:func:`first_step_limit`: torch's own timeout error would otherwise come first and blame a healthy rank) and:

* it is not waiting for the other ranks (it is in user code, data loading, a file read...): it is the culprit; or
* it waits in a collective and no rank at all made progress for as long. Progress of any rank is one counter on
  the store, bumped at most once per interval per rank, so a rank waiting in a barrier while rank 0 writes a
  slow checkpoint is not a hang. While any rank runs under its first-step allowance, waiting ranks allow as much.
  A waiting rank also allows :data:`WAITING_GRACE_S` more, so that the rank that is stuck (whose watchdog samples
  at another moment) reports first and the report names it, not one of the ranks waiting for it.

The report (stacks, the summary) is :mod:`xtrain.core._internal.hang_report`; the protocol that makes every rank
take part and exit is in :mod:`xtrain.core._internal.watchdog`.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from xtrain.core._internal.progress_signal import PROGRESS, ProgressSignal
from xtrain.core.errors import ConfigError

__all__ = ["DEFAULT_HANG_TIMEOUT", "FIRST_STEP_FACTOR", "MIN_HANG_TIMEOUT", "WAITING_GRACE_S", "HangMonitor",
           "first_step_limit", "parse_hang_timeout", "report_margin"]

DEFAULT_HANG_TIMEOUT = 900.0
FIRST_STEP_FACTOR = 4.0
MIN_HANG_TIMEOUT = 1.0  # the watchdog samples progress every 0.5 s: a shorter limit cannot be measured
WAITING_GRACE_S = 2.0  # four samples; below report_margin's 5 s, so the report still comes before torch's timeout
_PROGRESS_KEY = "progress"
_COLD_KEY = "cold"


def parse_hang_timeout(value: Any) -> float | None:
    """Seconds from a Trainer/Engine ``hang_timeout`` (a number, a timedelta, or ``None`` to turn detection off)."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
            or seconds <= 0:
        raise ConfigError("hang_timeout", value, "must be a positive number of seconds, a timedelta, or None.",
                          fix=f"write hang_timeout={DEFAULT_HANG_TIMEOUT:.0f} (15 minutes, the default), or "
                              f"hang_timeout=None to turn hang detection off.")
    if seconds < MIN_HANG_TIMEOUT:
        raise ConfigError("hang_timeout", value, f"is below the minimum of {MIN_HANG_TIMEOUT:g} s: the watchdog "
                          "samples progress every 0.5 s, and a healthy rank would be reported as hung while it "
                          "starts.", fix=f"write hang_timeout={DEFAULT_HANG_TIMEOUT:.0f} (15 minutes, the default), "
                          "a few seconds at least for a test, or hang_timeout=None to turn hang detection off.")
    return float(seconds)


def report_margin(collective_timeout: float) -> float:
    """How long before the process-group timeout a hang must be detected: its report needs a few seconds to gather
    every rank's stacks before torch's timeout error ends the waiting ranks (10 %, between 5 s and 1 min)."""
    return min(max(0.1 * collective_timeout, 5.0), 60.0)


def first_step_limit(timeout: float, collective_timeout: float | None) -> float:
    """The first step's allowance: :data:`FIRST_STEP_FACTOR` x ``timeout``, capped below the process-group timeout.

    A first step that hangs (a barrier or ``sync_dist`` that only some ranks reach in step 0) must be reported before
    torch's timeout makes the waiting rank fail with an error that blames it. The cap never goes below ``timeout``
    itself (a ``hang_timeout`` at or above the process-group timeout is warned about when it is set).
    """
    limit = FIRST_STEP_FACTOR * timeout
    if collective_timeout is None:
        return limit
    return max(timeout, min(limit, collective_timeout - report_margin(collective_timeout)))


class HangMonitor:
    """The per-rank state of hang detection; :meth:`poll` runs in the watchdog thread every interval.

    Args:
        store: The watchdog's store (shared by all ranks of the run).
        timeout: ``hang_timeout`` in seconds.
        thread_id: The thread that trains (the one that started the watchdog).
        signal: The progress signal (the process's own by default).
        collective_timeout: The strategy's process-group timeout in seconds, which caps the first step's allowance
            (``None``: no cap).
    """

    def __init__(self, store: Any, *, timeout: float, thread_id: int, now: float,
                 signal: ProgressSignal = PROGRESS, collective_timeout: float | None = None) -> None:
        self.store = store
        self.timeout = timeout
        self.first_step = first_step_limit(timeout, collective_timeout)
        self.thread_id = thread_id
        self.signal = signal
        self.last_count, self.last_change = signal.count, now
        self.last_steps = signal.steps
        self.global_value, self.global_change = -1, now
        self.seen: set[str] = set()
        self.cold = False

    def stalled_for(self, now: float) -> float:
        return now - self.last_change

    def poll(self, now: float) -> str | None:
        """Sample the signal; returns why this rank counts as hung, or ``None``."""
        s = self.signal
        count, steps, phase = s.count, s.steps, s.phase
        if steps != self.last_steps:
            self.last_steps = steps
            self.seen.add(s.stepped)
        changed = count != self.last_count
        if changed:
            self.last_count, self.last_change = count, now
        cold = phase not in self.seen
        if cold != self.cold:
            self.cold = cold
            self.store.add(_COLD_KEY, 1 if cold else -1)
        value = int(self.store.add(_PROGRESS_KEY, 1 if changed else 0))
        if value != self.global_value:
            self.global_value, self.global_change = value, now
        limit = self.first_step if cold else self.timeout
        stalled = now - self.last_change
        if stalled <= limit:
            return None
        from xtrain.core._internal.hang_report import main_thread_state  # only once a rank stalls

        waiting = main_thread_state(self.thread_id, s).waiting
        if waiting is None:
            return f"rank made no progress for {stalled:.1f} s (limit {limit:g} s)"
        others_cold = int(self.store.add(_COLD_KEY, 0)) > 0
        global_limit = self.first_step if others_cold else self.timeout
        if now - self.global_change <= global_limit + WAITING_GRACE_S:
            return None  # waiting for a rank that still makes progress (a slow save), or the stuck rank reports
        return f"no rank made progress for {now - self.global_change:.1f} s (limit {global_limit:g} s)"

    def close(self) -> None:
        """Leave the run's count of ranks under their first-step allowance (best effort)."""
        if self.cold:
            self.cold = False
            try:
                self.store.add(_COLD_KEY, -1)
            except Exception:  # noqa: BLE001 - the store may already be gone at shutdown
                pass
