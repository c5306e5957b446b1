"""How one rank takes part in ending a hung run: its stacks and state, the summary on the detecting rank, and the
failure record that lets a restarting launcher name the stuck rank.

The watchdog thread calls :func:`take_part` when any rank writes ``abort`` as a hang, then exits the process; this
module only reports, so the watchdog keeps the exit and its abort handler in one place.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from xtrain.core._internal.hang import HangMonitor
from xtrain.core._internal.hang_report import (
    WorkerStacks,
    end_workers,
    format_summary,
    gather_reports,
    main_thread_state,
    publish_report,
    rank_report,
    stack_block,
    stuck_ranks,
    summary_done,
    wait_for_summary,
    where,
    write_block,
)
from xtrain.core._internal.progress_signal import PROGRESS
from xtrain.core.restarts import write_failure

__all__ = ["take_part"]

_GATHER_S = 8.0  # how long the reporter waits for the others' reports
_EXIT_S = 12.0  # how long the others wait for the summary before they exit


def take_part(store: Any, *, rank: int, world_size: int, reporter: int, reason: str, monitor: HangMonitor | None,
              workers: WorkerStacks, global_step: int | None, hang_timeout: float, poll: float) -> None:
    """Print this rank's stacks, publish its report, and on the detecting rank (``reporter``) gather every report
    and print the summary; other ranks wait for that summary (the store may leave with the reporter). Returns when
    this rank may exit. A rank stuck in its own code (not waiting for others) records the hang as its failure."""
    host = socket.gethostname()
    state = main_thread_state(monitor.thread_id, PROGRESS) if monitor else None
    stalled = monitor.stalled_for(time.monotonic()) if monitor else 0.0
    stacks = workers.collect()
    write_block(stack_block(rank, host, stacks))
    end_workers()
    report = rank_report(rank, host, state=state, stalled=stalled, workers=stacks, global_step=global_step)
    if state is not None and state.waiting is None:
        _record(rank, report, "no progress (stuck, not waiting for other ranks)")
    publish_report(store, rank, report)
    if reporter != rank:
        wait_for_summary(store, within=_EXIT_S, poll=poll)
        return
    reports = gather_reports(store, world_size, within=_GATHER_S, poll=poll)
    if rank in reports and not stuck_ranks(reports):  # no rank recorded the hang as its own
        missing = [str(r) for r in range(world_size) if r not in reports]
        why = (f"rank {', '.join(missing)} gave no report (frozen, or a C call holds its GIL)" if missing
               else "every rank waits in a collective and they do not match")
        _record(rank, reports[rank], why)
    write_block(format_summary(reports, world_size=world_size, reporter=rank, reason=reason, timeout=hang_timeout))
    summary_done(store)


def _record(rank: int, report: dict[str, Any], why: str) -> None:
    """Record the hang as this rank's failure for a restarting launcher (so it names this rank, not a victim)."""
    frame = report.get("user_frame")
    write_failure(rank=rank, step=report.get("global_step"), start_step=None,
                  error=f"Hang: {why}, {where(report)}" + (f", innermost user code {frame}" if frame else ""))
