"""Preemption: SIGTERM (and SIGUSR1 under SLURM) save a checkpoint at the next safe point, then stop cleanly.

The handlers are installed for the whole ``fit``. Once training runs, the handler only sets a flag: the fit loop
checks it at save points (after an optimizer step, or after an epoch), where every rank agrees on it, writes the
checkpoint there and stops. Nothing heavy ever runs inside a signal handler, which is what makes checkpoints taken
this way reliable (Lightning #21406). Once the checkpoint is on every rank's disk (and, after SLURM's SIGUSR1,
the requeue asked for) ``fit`` raises :class:`~xtrain.core.errors.SIGTERMException` (exit code 143) on every rank,
as Lightning does on SIGTERM. Before training starts (setup, restore, sanity check) there is nothing to save:
SIGTERM raises the exception at once, so the run still ends through ``on_exception``, its loggers and teardown.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xtrain.core.errors import SIGTERMException

if TYPE_CHECKING:
    from xtrain.core.strategy import Strategy
    from xtrain.core.trainer import Trainer

__all__ = ["Preemption", "default_last_path", "exit_failed_on_sigterm"]


def default_last_path(trainer: Trainer) -> Path:
    """Where a preemption checkpoint goes: the first ModelCheckpoint's ``last.ckpt``, else the root's."""
    callback = trainer.checkpoint_callback
    if callback is not None:
        return callback.resolve_dirpath(trainer) / f"{callback.LAST_NAME}{callback.FILE_EXTENSION}"
    return Path(trainer.default_root_dir) / "checkpoints" / "last.ckpt"


class Preemption:
    """Catches preemption signals during ``fit`` and turns them into a checkpoint and a clean stop."""

    def __init__(self) -> None:
        self.requested = False
        self.signal_number: int | None = None
        self.preempted = False
        self._training = False
        self._pending: Callable[[], bool] | None = None

    def _handler(self, signum: int, frame: Any) -> None:
        self.requested = True
        self.signal_number = signum
        if not self._training and signum == signal.SIGTERM:
            print("xtrain: SIGTERM before training started: nothing to save; stopping.", file=sys.stderr, flush=True)
            raise SIGTERMException

    @property
    def received_sigterm(self) -> bool:
        """Whether the last ``fit`` was stopped by a preemption signal (on any rank) or got SIGTERM before training."""
        return self.preempted or self.signal_number == signal.SIGTERM

    def start_training(self) -> None:
        """The fit loop starts: from now on a signal is acted on at the next save point."""
        self._training = True

    def ending_fit(self) -> None:
        """Called when the fit loop ends: raise :class:`SIGTERMException` if a preemption signal stopped it (on every
        rank: they all stopped at the same save point, whichever rank was signalled)."""
        if self.preempted:
            raise SIGTERMException

    def stopped_together(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the SIGTERM stop every rank made at the same save point (not one rank's failure)."""
        return isinstance(exc, SIGTERMException) and self.preempted

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Install the handlers for the duration of ``fit`` (only possible in the main thread)."""
        self._pending = None
        self.preempted = self.requested = self._training = False
        self.signal_number = None
        if threading.current_thread() is not threading.main_thread():
            yield
            self._drain()
            return
        signals = [signal.SIGTERM]
        if "SLURM_JOB_ID" in os.environ and hasattr(signal, "SIGUSR1"):
            signals.append(signal.SIGUSR1)
        previous = {s: signal.signal(s, self._handler) for s in signals}
        try:
            yield
            self._drain()
        finally:
            self._pending = None
            for s, handler in previous.items():
                signal.signal(s, _after_fit(s, handler))

    def _drain(self) -> None:
        """Complete the decision still in flight when the loop ends, so no collective outlives the fit."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending()

    def agreed(self, strategy: Strategy) -> bool:
        """Whether any rank was signalled; every rank gets the same answer at the same save point.

        With several ranks the vote is asynchronous: each save point starts an all-reduce of this rank's flag and
        reads the one started at the previous save point, which has long completed. A blocking all-reduce here cost
        up to 40% of the steps/s of a 2-rank CPU run (tools/bench/ddp.py); the price is that a signal is acted on
        one save point later, still at the same step on every rank.
        """
        if strategy.world_size == 1:
            return self.requested
        pending, self._pending = self._pending, strategy.start_boolean_decision(self.requested, all=False)
        return pending() if pending is not None else False

    def save_and_stop(self, trainer: Trainer) -> None:
        if self.preempted:  # the epoch-end save point right after the step that saved: saved (and requeued) once
            return
        path = default_last_path(trainer)
        trainer._save_checkpoint_to([path], weights_only=False)
        callback = trainer.checkpoint_callback
        if callback is not None:
            callback.saved_elsewhere(trainer, str(path))
        trainer.should_stop = True
        self.preempted = True
        # Every rank's part must be on disk before any rank leaves: a requeue ends every process of the job, and a
        # launcher (torchrun) ends the others when one exits 143; saves in flight (plugins="async") land first.
        trainer.strategy.checkpoint_io.wait()
        several = trainer.strategy.world_size > 1
        # SLURM's warning may reach another rank than rank 0 (first, or alone): the job is requeued if any rank got it.
        warned = self.signal_number == getattr(signal, "SIGUSR1", None)
        if several:
            warned = trainer.strategy.reduce_boolean_decision(warned, all=False)  # once per run: blocking is fine
            trainer.strategy.barrier("preemption_saved")
        if trainer.is_global_zero:
            name = "SLURM's SIGUSR1 warning" if warned else "SIGTERM"
            print(f"xtrain: preemption signal ({name}) received; saved {path} at step {trainer.global_step} and "
                  f"stopping. Resume with ckpt_path='{path}' (ckpt_path='auto' finds it when the next run has the same "
                  f"name: run_name=..., a requeued SLURM job's id, torchrun's --rdzv-id).", file=sys.stderr, flush=True)
            if warned and "SLURM_JOB_ID" in os.environ:
                _requeue(os.environ["SLURM_JOB_ID"])
        if several:  # no rank exits (143) before the requeue was asked: `srun --kill-on-bad-exit` ends the others
            trainer.strategy.barrier("preemption_requeued")


def exit_failed_on_sigterm() -> None:
    """This rank's run failed in a job of several processes: a SIGTERM from now on ends it with 1, not 143.

    The job's other processes are being ended, and a launcher such as ``srun --kill-on-bad-exit`` then sends SIGTERM
    to every process still running, often this one, still printing its traceback: ended by the signal it would exit
    with 143, the code of a preempted job, which a scheduler requeues (``RequeueExit=143``) and a user reads as a
    preemption. A handler the user installed is kept.
    """
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return
    signal.signal(signal.SIGTERM, _exit_failed)


def _exit_failed(signum: int, frame: Any) -> None:
    sys.stderr.flush()
    os._exit(1)


def _after_fit(signum: int, previous: Any) -> Any:
    """The handler to restore when the fit ends.

    SLURM's ``--signal=USR1@N`` warning may come after training finished (it is sent up to a minute early or late,
    and again in every requeued run): with the default action it would kill a job that has done its work and mark it
    FAILED. There is nothing left to save then, so after a fit under SLURM the warning is ignored instead.
    """
    if signum == getattr(signal, "SIGUSR1", None) and previous == signal.SIG_DFL:
        return signal.SIG_IGN
    return previous


def _requeue(job_id: str) -> None:
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        print("xtrain: SLURM job could not be requeued: scontrol is not on PATH.", file=sys.stderr)
        return
    result = subprocess.run([scontrol, "requeue", job_id], capture_output=True, text=True, check=False)
    outcome = "requeued" if result.returncode == 0 else (
        f"not requeued ({result.stderr.strip()[:300]}); a job is requeued when submitted with --requeue (or with "
        f"JobRequeue=1 in slurm.conf): resubmit it, and ckpt_path='auto' with the same run_name resumes it")
    print(f"xtrain: SLURM job {job_id} {outcome}.", file=sys.stderr, flush=True)
