"""What a restarting launcher and the ranks it starts tell each other.

A job that heals itself needs two things that outlive a process: the identity of the run (so a restarted group
finds its own checkpoints, and not those of another run sharing ``default_root_dir``) and the cause of each
failure (so a launcher can tell a deterministic bug from a crash worth retrying). Both travel through environment
variables and small JSON files, so any launcher (xtrain's, torchrun, SLURM) can take part.

The run identity is, in order: an explicit name (``Trainer(run_name=...)``), ``XTRAIN_RUN_ID`` (which xtrain's
launcher exports to every rank of every attempt), ``TORCHELASTIC_RUN_ID`` (torchrun's ``--rdzv-id``, or the id
``--standalone`` makes) and ``SLURM_JOB_ID`` (kept by ``scontrol requeue``). Ids that are the same for every run
(torchrun's default ``"none"``) do not count.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FAILURE_DIR_ENV", "RESTART_COUNT_ENV", "RUN_ID_ENV", "FailureRecord", "RunIdentity", "directory_name",
           "read_failure", "run_identity", "write_failure"]

RUN_ID_ENV = "XTRAIN_RUN_ID"
RESTART_COUNT_ENV = "XTRAIN_RESTART_COUNT"
FAILURE_DIR_ENV = "XTRAIN_FAILURE_DIR"
_SOURCES = (RUN_ID_ENV, "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")
_NOT_AN_ID = {"", "none", "None"}


@dataclass(frozen=True, slots=True)
class RunIdentity:
    """A name that stays the same across restarts of one run.

    Attributes:
        name: The identity, reduced to characters safe in a directory name.
        source: Where it came from (``"run_name"`` or the environment variable's name), for the log.
    """

    name: str
    source: str


def run_identity(explicit: str | None = None) -> RunIdentity | None:
    """This run's identity (see the module docstring), or ``None`` when nothing names it."""
    if explicit:
        return RunIdentity(directory_name(explicit), "run_name")
    for variable in _SOURCES:
        value = os.environ.get(variable, "")
        if value not in _NOT_AN_ID:
            prefix = "" if variable == RUN_ID_ENV else variable.split("_")[0].lower() + "-"
            return RunIdentity(directory_name(prefix + value), variable)
    return None


def directory_name(name: str) -> str:
    """``name`` reduced to characters safe in a directory name (and a W&B run id); a ``run_name`` must already be
    one, so that two names never share a run."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".") or "_"


@dataclass(frozen=True, slots=True)
class FailureRecord:
    """Why a rank stopped: written by the rank when it can (an exception), read by its launcher.

    Attributes:
        rank: Global rank.
        step: The global step when it failed (``None`` if unknown).
        start_step: The global step this attempt started from (after any resume).
        error: ``"Type: message"`` of the exception, or ``""`` when the rank wrote only its start.
    """

    rank: int
    step: int | None
    start_step: int | None
    error: str


def write_failure(*, rank: int, step: int | None, start_step: int | None, error: str = "") -> None:
    """Record this rank's state for its launcher when the launcher asked for it (``XTRAIN_FAILURE_DIR``)."""
    folder = os.environ.get(FAILURE_DIR_ENV)
    if not folder:
        return
    path = Path(folder) / f"rank{rank}.json"
    if start_step is None:  # a failure keeps the start this attempt recorded
        earlier = read_failure(folder, rank)
        start_step = earlier.start_step if earlier else None
    record = {"rank": rank, "step": step, "start_step": start_step, "error": error[:2000]}
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)
    except OSError:
        pass


def read_failure(folder: str | os.PathLike[str], rank: int) -> FailureRecord | None:
    """The record rank ``rank`` wrote into ``folder``, or ``None`` if it wrote none (or it is unreadable)."""
    try:
        data: Any = json.loads((Path(folder) / f"rank{rank}.json").read_text())
        return FailureRecord(rank=int(data["rank"]), step=_int(data.get("step")),
                             start_step=_int(data.get("start_step")), error=str(data.get("error", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) else None
