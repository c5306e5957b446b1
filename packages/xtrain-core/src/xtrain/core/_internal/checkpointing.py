"""What a Trainer checkpoint contains, how it is restored, and how ``ckpt_path`` names are found.

A checkpoint is a dict. Its ``"xtrain"`` entry is the manifest: format version, strategy, world size, layout (full
or sharded) and the versions of every installed xtrain package. Loading reads the manifest first, so a checkpoint
from another strategy or world size is either converted or refused with a message that says what to run.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xtrain.core._internal.hparams import checkpoint_hparams
from xtrain.core._internal.manifest import FORMAT_VERSION, data_parallel_size, per_rank_batch_size, write_manifest
from xtrain.core._internal.rng import collect_rng_states
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

_log = logging.getLogger("xtrain")

__all__ = ["FORMAT_VERSION", "build_checkpoint", "find_checkpoint", "manifest", "restore_checkpoint", "restore_targets"]


def manifest(trainer: Trainer) -> dict[str, Any]:
    return write_manifest(trainer.strategy)


def restore_checkpoint(trainer: Trainer, checkpoint: dict[str, Any], path: str, *, fitting: bool,
                       configure_optimizers: Callable[[], None] | None = None) -> None:
    """Load a checkpoint into the run, all or nothing (:mod:`~xtrain.core._internal.restore_apply`, imported when a
    run restores, not with the Trainer); ``configure_optimizers`` runs after the ``on_load_checkpoint`` hooks."""
    from xtrain.core._internal.restore_apply import restore_checkpoint as apply

    apply(trainer, checkpoint, path, fitting=fitting, configure_optimizers=configure_optimizers)


def build_checkpoint(trainer: Trainer, *, weights_only: bool = False) -> dict[str, Any]:
    """The full state of ``trainer``'s run. Every rank must call it (it gathers the ranks' RNG states)."""
    strategy = trainer.strategy
    module = trainer.module
    checkpoint: dict[str, Any] = {
        "xtrain": manifest(trainer),
        "state_dict": strategy.module_state_dict(),
        "epoch": trainer._progress.checkpoint_epoch(),
        "global_step": trainer.global_step,
        # for on_world_size_change: the per-rank batches one optimizer step sees (data-parallel ranks x accumulation)
        "global_batches": data_parallel_size(strategy) * trainer.accumulate_grad_batches,
        # and the samples in each of them, to find the same place in the epoch with batches of another size
        "per_rank_batch_size": per_rank_batch_size(trainer._train_loader),
        **checkpoint_hparams(module),
    }
    if trainer.datamodule is not None:
        checkpoint.update(checkpoint_hparams(trainer.datamodule, "datamodule_"))
        checkpoint["datamodule"] = trainer.datamodule.state_dict()
    # One gather for what each rank holds alone: its generators, and (for a resume) its logged values.
    ranks = strategy.all_gather_object((collect_rng_states(),
                                        None if weights_only else trainer._metrics.checkpoint_state()))
    if weights_only:
        return checkpoint
    from xtrain.core._internal.callback_states import callback_states  # refuses two callbacks sharing a state_key

    checkpoint.update({
        "optimizer_states": [strategy.optimizer_state_dict(opt) for opt in trainer.optimizers],
        "lr_schedulers": [config.scheduler.state_dict() for config in trainer.lr_scheduler_configs],
        "precision": strategy.precision.state_dict(),
        "loops": trainer._progress.state_dict(),
        "callbacks": callback_states(trainer.callbacks),
        "loggers": [logger.state_dict() for logger in trainer.loggers],
        "rng": [rng for rng, _ in ranks],
        "logged": [logged for _, logged in ranks],
    })
    sampler = trainer._train_sampler
    if sampler is not None:
        checkpoint["sampler"] = sampler.state_dict()
    from xtrain.core._internal.metric_objects import gather_metric_states  # not at import: 0.5 ms of every import

    metric_states = gather_metric_states(module, strategy)  # torchmetrics states, one dict per rank
    if metric_states is not None:
        checkpoint["metric_states"] = metric_states
    return checkpoint


def restore_targets(trainer: Trainer, *, fitting: bool) -> dict[str, Any]:
    """What a checkpoint's entries are loaded into; sharded strategies read their shards straight into these."""
    targets: dict[str, Any] = {"state_dict": trainer.strategy.module}
    if fitting:
        targets["optimizer_states"] = list(trainer.optimizers)
    return targets


def find_checkpoint(trainer: Trainer, ckpt_path: str | Path) -> str | None:
    """Resolve ``"last"``, ``"best"`` or a path into an existing checkpoint path.

    ``"last"`` is, as in Lightning, the newest ``last*.ckpt`` of the run's ModelCheckpoints (or an
    OnExceptionCheckpoint's file); when there is none it warns and returns ``None`` (nothing is loaded), so a script
    can pass ``ckpt_path="last"`` from its first run on.
    """
    if ckpt_path == "best":
        best = next((cb.best_model_path for cb in trainer.checkpoint_callbacks if cb.best_model_path), None)
        passed: list[str] = []
        if not best:
            from xtrain.core._internal.best_checkpoint import best_from_last_checkpoint

            best, passed = best_from_last_checkpoint(trainer)
        if not best:
            why = f" Passed over: {'; '.join(passed)}." if passed else ""
            raise ConfigError("ckpt_path", ckpt_path, "there is no best checkpoint yet: no ModelCheckpoint of this "
                              "Trainer has saved one, and no last checkpoint of an earlier run in its folder names "
                              f"one it wrote.{why}",
                              fix="fit first (ModelCheckpoint(monitor=...) ranks by a metric, save_last=True lets a "
                                  "new process find the best), or pass a checkpoint's path.")
        return str(best)
    if ckpt_path == "last":
        from xtrain.core.sharded_checkpoint import checkpoint_complete

        candidates = _last_candidates(trainer)
        # A sharded directory whose manifest is missing was interrupted mid-save: never the one to resume from.
        existing = [p for p in candidates if checkpoint_complete(p)]
        if not existing:
            where = "no ModelCheckpoint: checkpointing is off" if not trainer.checkpoint_callbacks else \
                "no complete last*.ckpt beside the run's checkpoints"
            warnings.warn(f"ckpt_path='last': there is no last checkpoint ({where}), so none is loaded and the "
                          f"model is used as it is, as in Lightning. Fix: ModelCheckpoint(save_last=True) writes one "
                          f"(the default checkpointing does); ckpt_path='auto' resumes the newest complete checkpoint "
                          f"of any name.", UserWarning, stacklevel=4)
            return None
        chosen = str(max(existing, key=lambda p: p.stat().st_mtime_ns))
        _announce_last(trainer, chosen)
        return chosen
    path = Path(ckpt_path)
    if not path.exists():
        raise ConfigError("ckpt_path", str(ckpt_path), "does not exist.",
                          choices=["auto", "last", "best", "an existing path"],
                          fix="pass the path of a checkpoint file or directory ('auto' resumes a fit).")
    return str(path)


def _last_candidates(trainer: Trainer) -> list[Path]:
    """Lightning's candidates for ``"last"``: the ``last*.ckpt`` files of the ModelCheckpoints, and the file of an
    OnExceptionCheckpoint (another top-k file is not "last": it may be older than the weights in memory)."""
    from xtrain.core.callbacks.on_exception_checkpoint import OnExceptionCheckpoint

    found = [Path(p) for cb in trainer.checkpoint_callbacks for p in cb.last_checkpoint_candidates(trainer)
             if Path(p).name.startswith(cb.LAST_NAME)]
    found += [cb.ckpt_path for cb in trainer.callbacks if isinstance(cb, OnExceptionCheckpoint)]
    return [p for p in found if p.exists()]


def _announce_last(trainer: Trainer, path: str) -> None:
    """Name the checkpoint ``ckpt_path="last"`` resolved to; warn if another strategy or precision wrote it."""
    from xtrain.core._internal.checkpoint_gate import peek_manifest

    _log.info("ckpt_path='last': resuming from %s", path)
    meta = peek_manifest(path) or {}
    strategy = trainer.strategy
    now = {"strategy": strategy.name, "precision": strategy.precision.name}
    differ = {key: (meta[key], value) for key, value in now.items() if key in meta and meta[key] != value}
    if differ:
        told = "; ".join(f"{key}: checkpoint {saved!r} vs this run {current!r}" for key, (saved, current) in differ.items())
        warnings.warn(f"ckpt_path='last' chose {path}, which was written by a run with another setup ({told}). "
                      f"Resuming converts it; if you meant another run's checkpoint, pass its path.", stacklevel=3)
