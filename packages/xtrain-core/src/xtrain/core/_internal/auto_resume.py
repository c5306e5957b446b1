"""``ckpt_path="auto"``: resume this run from its newest complete checkpoint, or start it fresh.

"This run" is explicit (:func:`xtrain.core.restarts.run_identity`): loggers whose version was not fixed name their
directory after the identity, so every attempt of a run logs and checkpoints into one directory, and two runs
sharing ``default_root_dir`` never pick each other's files. A checkpoint is a candidate only when the checkpoint
gate accepts it (manifest, checksums, never unpickled beyond ``weights_only``); a torn save is skipped with a line
in the log. Rank 0 chooses and every rank loads what it chose.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, get_args

from xtrain.core.errors import CheckpointError, ConfigError
from xtrain.core.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from xtrain.core._internal.run_lock import RunLock
    from xtrain.core.launcher import Launcher
    from xtrain.core.restarts import RunIdentity
    from xtrain.core.trainer import Trainer

__all__ = ["Healing", "WorldSizePolicy", "check_auto", "check_run_name", "newest_complete", "newest_in",
           "note_failure", "parse_healing", "resolve_auto", "run_directory", "start_attempt"]

WorldSizePolicy = Literal["keep_per_rank_batch", "keep_global_batch"]


class Healing(NamedTuple):
    """The Trainer's settings for runs that restart (see ``Trainer``'s docstring)."""

    run_name: str | None = None
    max_restarts: int = 0
    on_world_size_change: WorldSizePolicy = "keep_per_rank_batch"


def check_run_name(run_name: object) -> None:
    """Refuse a ``run_name`` that is not a directory name as it is: rewriting it (``exp/1`` as ``exp_1``) would make
    two names one run, and ``ckpt_path="auto"`` would resume the other one's checkpoint."""
    from xtrain.core.restarts import directory_name

    if run_name is None:
        return
    if not isinstance(run_name, str) or not run_name.strip():
        raise ConfigError("run_name", run_name, "must be a non-empty string.", fix="write run_name='my-run'.")
    if directory_name(run_name) != run_name:
        bad = sorted({c for c in run_name if not (c.isascii() and (c.isalnum() or c in "_.-"))})
        where = f"cannot hold {' '.join(repr(c) for c in bad)}" if bad else "cannot start or end with '.'"
        raise ConfigError("run_name", run_name, f"names the run's directory (and its tracker run id), which "
                          f"{where}; rewritten, it could be another name's run.",
                          fix=f"use letters, digits, '_', '-' and '.', e.g. run_name={directory_name(run_name)!r}.")
    if len(run_name.encode()) > 200:
        raise ConfigError("run_name", run_name[:40] + "...", f"is {len(run_name.encode())} bytes, too long for a "
                          f"directory name (file systems allow 255, and the run's files add to it).",
                          fix="use a run_name of at most 200 characters.")


def parse_healing(*, run_name: object, max_restarts: object, on_world_size_change: object) -> Healing:
    check_run_name(run_name)
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ConfigError("max_restarts", max_restarts, "must be an integer >= 0.", fix="write max_restarts=3.")
    if on_world_size_change not in get_args(WorldSizePolicy):
        raise ConfigError("on_world_size_change", on_world_size_change, "is not a policy.",
                          choices=get_args(WorldSizePolicy), fix="write on_world_size_change='keep_per_rank_batch'.")
    return Healing(run_name, max_restarts, on_world_size_change)  # type: ignore[arg-type]


def check_auto(trainer: Trainer, healing: Healing, stage: str, ckpt_path: object, launcher: Launcher | None) -> None:
    """In the caller, before any process starts: hand ``max_restarts`` on, and refuse an ``"auto"`` with no run."""
    from xtrain.core.restarts import RESTART_COUNT_ENV, run_identity  # imported when a run starts, not with xtrain

    if healing.max_restarts:
        restarter = any(os.environ.get(v) for v in ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", RESTART_COUNT_ENV))
        if launcher is not None and launcher.supports_restarts:
            launcher.max_restarts = healing.max_restarts
            launcher.run_name = healing.run_name
        elif launcher is not None or not restarter:
            raise ConfigError("max_restarts", healing.max_restarts, "needs a launcher that starts (and can restart) "
                              f"the ranks; strategy {trainer.strategy.name!r} here has "
                              f"{type(launcher).__name__ if launcher else 'none'}.",
                              fix="use strategy='ddp' (any number of devices), or run under `torchrun "
                                  "--max-restarts=N` or SLURM requeue and leave max_restarts=0.")
        if stage == "fit" and ckpt_path != "auto" and RESTART_COUNT_ENV not in os.environ:  # once, in the caller
            shown = "None" if ckpt_path is None else repr(str(ckpt_path))
            start = "from step 0" if ckpt_path is None else f"from {shown} again"
            warnings.warn(f"max_restarts={healing.max_restarts}: after a failure the job runs fit again with "
                          f"ckpt_path={shown}, so each restart trains {start} and the failed attempt's "
                          f"progress is lost. Pass fit(..., ckpt_path='auto') to continue from the newest checkpoint.",
                          UserWarning, stacklevel=4)
    if ckpt_path != "auto":
        return
    if stage != "fit":
        raise ConfigError("ckpt_path", "auto", f"resumes a fit; {stage} has no run to continue.",
                          fix="pass 'last', 'best' or a path.")
    provides = launcher is not None and launcher.supports_restarts and healing.max_restarts > 0
    named_dir = any(cb.dirpath is not None for cb in trainer.checkpoint_callbacks)
    if not trainer.checkpoint_callbacks:
        raise ConfigError("ckpt_path", "auto", "resumes from this run's checkpoints, but checkpointing is off.",
                          fix="keep enable_checkpointing=True or add a ModelCheckpoint.")
    if run_identity(healing.run_name) is None and not provides and not named_dir:
        raise ConfigError("ckpt_path", "auto", "needs to know which run this is, so that it never resumes another "
                          "run's checkpoint, and nothing names this run.",
                          fix="pass Trainer(run_name='my-run'), or set XTRAIN_RUN_ID, or launch with torchrun "
                              "(--rdzv-id), SLURM, or Trainer(max_restarts=N) (the launcher names the run).")


def resolve_auto(trainer: Trainer, healing: Healing, lock: RunLock) -> str | None:
    """On every rank: name the run's directories, then load rank 0's choice (``None``: start fresh). Rank 0 takes
    ``lock`` on the run's first checkpoint directory first (another live job fitting the same run is refused)."""
    from xtrain.core.restarts import run_identity

    identity = run_identity(healing.run_name)
    if identity is not None:
        for logger in trainer.loggers:
            logger.name_run(identity.name)
    chosen: str | None = None
    if trainer.is_global_zero:
        dirs = list(dict.fromkeys(cb.resolve_dirpath(trainer) for cb in trainer.checkpoint_callbacks))
        lock.acquire(dirs[0], identity.name if identity is not None else str(dirs[0]))
        found = newest_complete(_candidates(dirs), need="loops")
        chosen = str(found) if found else None
        _announce(identity, chosen, dirs)
    return trainer.strategy.broadcast(chosen)


def run_directory(root: str | os.PathLike[str], run_name: str | None) -> Path:
    """``root/<run identity>``: the Engine's counterpart of the Trainer's run directory."""
    from xtrain.core.restarts import run_identity

    check_run_name(run_name)
    identity = run_identity(run_name)
    if identity is None:
        raise ConfigError("run_name", run_name, "is needed: nothing names this run, so a restart could not find "
                          "its own checkpoints.", fix="pass run_name='my-run', set XTRAIN_RUN_ID, or launch with "
                          "torchrun (--rdzv-id) or SLURM.")
    return Path(root) / identity.name


def newest_in(directory: str | os.PathLike[str]) -> Path | None:
    """The newest complete checkpoint in ``directory`` (``None``: none, or no such directory), logging skips."""
    return newest_complete(_candidates([Path(directory)]))


def _candidates(dirs: Iterable[Path]) -> list[Path]:
    from xtrain.core.sharded_checkpoint import MANIFEST_FILE

    return [p for d in dirs if d.is_dir() for p in d.iterdir()
            if p.suffix == ".ckpt" or (p.is_dir() and (p / MANIFEST_FILE).exists())]


def newest_complete(paths: Iterable[Path], *, need: str | None = None) -> Path | None:
    """The newest of ``paths`` the checkpoint gate accepts (holding entry ``need``); the others are logged."""
    from xtrain.core._internal.checkpoint_gate import inspect_checkpoint

    # last.ckpt first among equals: it is a hard link of the epoch file saved with it (same inode, same time).
    for path in sorted(paths, key=lambda p: (_mtime(p), p.name.startswith("last")), reverse=True):
        try:
            _, keys = inspect_checkpoint(path)
        except (CheckpointError, OSError) as err:
            rank_zero_info(f"ckpt_path='auto': skipping {path}: not a complete checkpoint ({err})")
            continue
        if need is not None and "xtrain" not in keys:  # e.g. Lightning's last.ckpt in a migrated script's folder
            written = "Lightning" if "pytorch-lightning_version" in keys else "another program"
            rank_zero_info(f"ckpt_path='auto': skipping {path}: written by {written}, not by xtrain's Trainer")
            continue
        if need is not None and need not in keys:
            rank_zero_info(f"ckpt_path='auto': skipping {path}: it has no {need!r} entry (weights only?)")
            continue
        return path
    return None


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def _announce(identity: RunIdentity | None, chosen: str | None, dirs: list[Path]) -> None:
    from xtrain.core.restarts import RESTART_COUNT_ENV

    who = f"run {identity.name!r} (from {identity.source})" if identity else "this run"
    attempt = os.environ.get(RESTART_COUNT_ENV, os.environ.get("TORCHELASTIC_RESTART_COUNT"))
    again = f", restart {attempt}" if attempt and attempt != "0" else ""
    if chosen:
        rank_zero_info(f"ckpt_path='auto': resuming {who}{again} from {chosen}")
    else:
        rank_zero_info(f"ckpt_path='auto': no complete checkpoint of {who} in "
                       f"{', '.join(str(d) for d in dirs)}: starting fresh{again}")


def start_attempt(trainer: Trainer, healing: Healing, loaded: dict[str, Any] | None) -> None:
    """After a restore: apply the world-size policy and tell a restarting launcher where this attempt started."""
    if loaded is not None:
        from xtrain.core._internal.elastic import adapt_to_world_size

        adapt_to_world_size(trainer, healing.on_world_size_change, loaded)
    from xtrain.core.restarts import write_failure

    write_failure(rank=trainer.global_rank, step=None, start_step=trainer.global_step)


def note_failure(trainer: Trainer, exc: BaseException) -> None:
    """The rank is failing: record the step and the error for a restarting launcher (no-op without one)."""
    from xtrain.core.restarts import write_failure

    write_failure(rank=trainer.global_rank, step=trainer.global_step, start_step=None,
                  error=f"{type(exc).__name__}: {exc}")


def note_preemption(trainer: Trainer, *, signalled: bool) -> None:
    """Every rank stopped at one save point after a preemption signal: record it for a restarting launcher, which
    otherwise saw exit code 143 with "no Python error recorded" and named whichever rank exited first."""
    from xtrain.core.restarts import write_failure

    whose = "this rank" if signalled else "another rank"
    write_failure(rank=trainer.global_rank, step=trainer.global_step, start_step=None,
                  error=f"preempted: a preemption signal reached {whose}; every rank saved the checkpoint at step "
                        f"{trainer.global_step} and stopped")
