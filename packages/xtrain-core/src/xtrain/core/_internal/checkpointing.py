"""What a Trainer checkpoint contains, how it is restored, and how ``ckpt_path`` names are found.

A checkpoint is a dict. Its ``"xtrain"`` entry is the manifest: format version, strategy, world size, layout (full
or sharded) and the versions of every installed xtrain package. Loading reads the manifest first, so a checkpoint
from another strategy or world size is either converted or refused with a message that says what to run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from xtrain.core._internal.hparams import checkpoint_hparams
from xtrain.core._internal.metric_objects import gather_metric_states, load_metric_states
from xtrain.core._internal.rng import collect_rng_states
from xtrain.core._internal.versions import xtrain_versions
from xtrain.core.errors import CheckpointError, ConfigError
from xtrain.core.sharded_checkpoint import checkpoint_complete

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

__all__ = ["FORMAT_VERSION", "build_checkpoint", "find_checkpoint", "manifest", "restore_checkpoint", "restore_targets"]

FORMAT_VERSION = 1


def manifest(trainer: Trainer) -> dict[str, Any]:
    strategy = trainer.strategy
    return {
        "format_version": FORMAT_VERSION,
        "strategy": strategy.name,
        "world_size": strategy.world_size,
        "layout": strategy.checkpoint_layout,
        "precision": strategy.precision.name,
        "versions": xtrain_versions(),
    }


def build_checkpoint(trainer: Trainer, *, weights_only: bool = False) -> dict[str, Any]:
    """The full state of ``trainer``'s run. Every rank must call it (it gathers the ranks' RNG states)."""
    strategy = trainer.strategy
    module = trainer.module
    checkpoint: dict[str, Any] = {
        "xtrain": manifest(trainer),
        "state_dict": strategy.module_state_dict(),
        "epoch": trainer._progress.checkpoint_epoch(),
        "global_step": trainer.global_step,
        **checkpoint_hparams(module),
    }
    if trainer.datamodule is not None:
        checkpoint.update(checkpoint_hparams(trainer.datamodule, "datamodule_"))
        checkpoint["datamodule"] = trainer.datamodule.state_dict()
    all_rng = strategy.all_gather_object(collect_rng_states())
    if weights_only:
        return checkpoint
    checkpoint.update({
        "optimizer_states": [strategy.optimizer_state_dict(opt) for opt in trainer.optimizers],
        "lr_schedulers": [config.scheduler.state_dict() for config in trainer.lr_scheduler_configs],
        "precision": strategy.precision.state_dict(),
        "loops": trainer._progress.state_dict(),
        "callbacks": {cb.state_key: cb.state_dict() for cb in trainer.callbacks},
        "loggers": [logger.state_dict() for logger in trainer.loggers],
        "rng": all_rng,
    })
    sampler = trainer._train_sampler
    if sampler is not None:
        checkpoint["sampler"] = sampler.state_dict()
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


def restore_checkpoint(trainer: Trainer, checkpoint: dict[str, Any], path: str, *, fitting: bool) -> None:
    """Load module weights, and when ``fitting`` the optimizer, schedulers, loops, callbacks and loggers."""
    strategy = trainer.strategy
    meta = checkpoint.get("xtrain")
    if not isinstance(meta, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(f"checkpoint {path!r} is not an xtrain checkpoint (it has no 'xtrain' manifest or no "
                              f"'state_dict'). Load plain state dicts with module.load_state_dict(torch.load(...)).")
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {path!r} has format version {meta['format_version']}; this xtrain-core reads "
                              f"up to {FORMAT_VERSION}. Upgrade: pip install -U xtrain-core")
    trainer._hooks.call("on_load_checkpoint", checkpoint)
    strategy.load_module_state_dict(checkpoint["state_dict"])
    if not fitting or "optimizer_states" not in checkpoint:
        return
    if len(checkpoint["optimizer_states"]) != len(trainer.optimizers):
        raise CheckpointError(f"checkpoint {path!r} holds {len(checkpoint['optimizer_states'])} optimizer state(s) but "
                              f"configure_optimizers returned {len(trainer.optimizers)}.")
    for opt, state in zip(trainer.optimizers, checkpoint["optimizer_states"], strict=True):
        strategy.load_optimizer_state_dict(opt, state)
    for config, state in zip(trainer.lr_scheduler_configs, checkpoint.get("lr_schedulers", []), strict=False):
        config.scheduler.load_state_dict(state)
    trainer._schedulers_resumed = bool(trainer.lr_scheduler_configs)
    strategy.precision.load_state_dict(checkpoint.get("precision", {}))
    trainer._progress.load_state_dict(checkpoint.get("loops", {}))
    states = checkpoint.get("callbacks", {})
    for cb in trainer.callbacks:
        if cb.state_key in states:
            cb.load_state_dict(states[cb.state_key])
    if trainer.datamodule is not None and "datamodule" in checkpoint:
        trainer.datamodule.load_state_dict(checkpoint["datamodule"])
    for logger, state in zip(trainer.loggers, checkpoint.get("loggers", []), strict=False):
        logger.resume(state, step=trainer._progress.global_step)
    same_world = meta.get("world_size") == strategy.world_size
    rng = checkpoint.get("rng")
    if rng:
        trainer._pending_rng = rng[strategy.global_rank] if same_world else None
    if checkpoint.get("metric_states") and same_world:
        load_metric_states(trainer.module, checkpoint["metric_states"][strategy.global_rank])
    trainer._pending_sampler = checkpoint.get("sampler")


def find_checkpoint(trainer: Trainer, ckpt_path: str | Path) -> str:
    """Resolve ``"last"``, ``"best"`` or a path into an existing checkpoint path."""
    if ckpt_path == "best":
        best = next((cb.best_model_path for cb in trainer.checkpoint_callbacks if cb.best_model_path), None)
        if not best:
            from xtrain.core._internal.best_checkpoint import best_from_last_checkpoint

            best = best_from_last_checkpoint(trainer)
        if not best:
            raise ConfigError("ckpt_path", ckpt_path, "there is no best checkpoint yet (no ModelCheckpoint with a "
                              "monitor has saved one in this Trainer).",
                              fix="fit with ModelCheckpoint(monitor=...) first, or pass a path.")
        return str(best)
    if ckpt_path == "last":
        candidates = [Path(p) for cb in trainer.checkpoint_callbacks for p in cb.last_checkpoint_candidates(trainer)]
        # A sharded directory whose manifest is missing was interrupted mid-save: never the one to resume from.
        existing = [p for p in candidates if checkpoint_complete(p)]
        if not existing:
            raise ConfigError("ckpt_path", ckpt_path, f"found no 'last' checkpoint (looked for "
                              f"{sorted({str(p) for p in candidates}) or 'nothing: checkpointing is off'}).",
                              fix="train once with checkpointing on, or pass a path.")
        return str(max(existing, key=lambda p: p.stat().st_mtime_ns))
    path = Path(ckpt_path)
    if not path.exists():
        raise ConfigError("ckpt_path", str(ckpt_path), "does not exist.", choices=["last", "best", "an existing path"],
                          fix="pass the path of a checkpoint file or directory.")
    return str(path)
