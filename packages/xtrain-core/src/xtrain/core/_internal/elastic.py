"""What a resume does when the checkpoint was written by a different number of ranks (an elastic restart).

Weights, optimizer state and counters load across world sizes as they are. Two things depend on the number of
data-parallel ranks (the world size, unless tensor-parallel ranks share their batches):

* the global batch (per-rank batch times ranks times accumulation). ``"keep_per_rank_batch"`` (the default) keeps
  each rank's batch, so the global batch changes with the world size and the log says so; ``"keep_global_batch"``
  changes ``accumulate_grad_batches`` by the ratio of the world sizes so that an optimizer step sees as many
  samples as before (it must divide evenly). The learning rate is never changed.
* the position inside an interrupted epoch. The distributed sampler deals one permutation of the dataset out to
  the ranks in turn, so the samples consumed by ``W0`` ranks after ``b`` batches of ``B0`` each are the first
  ``W0*b*B0`` of that permutation; when that divides by the new ranks' step (``W1*B1``, the per-rank batch may
  have changed too) the new ranks continue exactly after them, otherwise at the nearest batch below (some samples
  are seen twice). A position at the end of the epoch stays there: the next epoch starts. The ranks' RNG states
  belong to the old ranks and are not restored (restore_apply), so random augmentation and dropout differ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xtrain.core._internal.manifest import data_parallel_size, per_rank_batch_size
from xtrain.core.errors import ConfigError
from xtrain.core.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

__all__ = ["adapt_to_world_size"]


def adapt_to_world_size(trainer: Trainer, policy: str, checkpoint: dict[str, Any]) -> None:
    """Apply ``policy`` when the checkpoint names another world size or per-rank batch than this run's. Called once
    the training loader exists: a position inside an epoch is counted in its batches.

    ``checkpoint["global_batches"]`` (data-parallel ranks x accumulation when it was written) keeps the global batch
    of the run across several restarts at different sizes; ``checkpoint["per_rank_batch_size"]`` (the samples of a
    batch on one rank) converts the position when the batch changed too.
    """
    meta = checkpoint.get("xtrain", {})
    # What matters is how many different batches a step saw: the data-parallel ranks (tensor-parallel ranks share
    # theirs). Checkpoints written before the manifest recorded it name the world size.
    saved = meta.get("data_parallel_size", meta.get("world_size"))
    now = data_parallel_size(trainer.strategy)
    accumulate = trainer.accumulate_grad_batches
    target = checkpoint.get("global_batches")
    if not isinstance(saved, int) or saved < 1:
        return
    batch_now = per_rank_batch_size(trainer._train_loader)
    batch_then = checkpoint.get("per_rank_batch_size")
    if not isinstance(batch_then, int) or isinstance(batch_then, bool) or batch_then < 1 or batch_now is None:
        batch_then = batch_now = 1  # unknown: the per-rank batch is taken to be the same
    if not isinstance(target, int) or target < 1:
        target = saved * accumulate
    if policy == "keep_global_batch" and target != now * accumulate:
        if target % now:
            raise ConfigError("on_world_size_change", policy, f"cannot keep the global batch of {target} per-rank "
                              f"batches (ranks x accumulate_grad_batches) with {now} rank(s).",
                              choices=["keep_per_rank_batch", "keep_global_batch"],
                              fix="restart with a world size that divides it, or use 'keep_per_rank_batch'.")
        trainer.accumulate_grad_batches = target // now
        trainer.strategy.set_gradient_accumulation(trainer.accumulate_grad_batches)
        told = (f"keeping the global batch: accumulate_grad_batches {accumulate} -> "
                f"{trainer.accumulate_grad_batches}")
    elif saved == now and batch_then == batch_now:
        return
    elif batch_then == batch_now:
        told = (f"keeping the per-rank batch, so the global batch changes by {now}/{saved} (set "
                f"Trainer(on_world_size_change='keep_global_batch') to keep it through gradient accumulation)")
    elif saved * batch_then == now * batch_now:
        told = f"the per-rank batch is {batch_now} samples (was {batch_then}), so the global batch is unchanged"
    else:
        told = (f"the per-rank batch is {batch_now} samples (was {batch_then}), so the global batch changes from "
                f"{saved * batch_then * accumulate} to {now * batch_now * accumulate} samples")
    told += _continue_epoch(trainer, consumed=saved * batch_then, step=now * batch_now)
    rank_zero_info(f"resuming a checkpoint of {saved} data-parallel rank(s) with {now}: {told}. The learning rate "
                   "is unchanged.")


def _continue_epoch(trainer: Trainer, *, consumed: int, step: int) -> str:
    """Move the position inside the saved epoch to the batch of this run that follows the same samples: the saved
    ranks' batches took ``consumed`` samples of the epoch's permutation each, this run's take ``step``."""
    progress = trainer._progress
    done = progress.batches_in_epoch
    if not done:
        return ""
    samples, total = done * consumed, trainer.num_training_batches
    progress.batches_in_epoch = samples // step
    if progress.batches_in_epoch >= total:  # the fit loop then only ends that epoch
        progress.batches_in_epoch = int(total)
        return f"; the epoch it was saved in had ended ({samples} samples): the next one starts"
    exact = "exactly" if samples % step == 0 else "approximately (some samples of it are seen again)"
    return f"; the interrupted epoch continues {exact} at batch {progress.batches_in_epoch}"
