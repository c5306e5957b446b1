"""Every rank of a run resumes from the same checkpoint, or the run stops before training.

``ckpt_path="last"``/``"best"`` and paths are resolved by each process: under ``torchrun`` on several nodes whose
checkpoint folders are local disks, node 0 finds ``last.ckpt`` and node 1 finds none (or an older copy). Training on
from different places runs the ranks' collectives out of step: a hang, or silently averaged gradients of different
steps. Two small gathers (only when a checkpoint was asked for) turn that into one error naming each rank's file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from xtrain.core.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    from xtrain.core.strategy import Strategy

__all__ = ["check_same_checkpoint", "check_same_position"]

_FIX = ("keep checkpoints on storage every node reads (ModelCheckpoint(dirpath=...) or Trainer(default_root_dir=...) "
        "on a shared filesystem), or pass ckpt_path=<file> present at the same path on every node, with the same "
        "content.")


def check_same_checkpoint(strategy: Strategy, requested: Any, resolved: str | Path | None,
                          problem: ConfigError | None = None) -> None:
    """Before loading: every rank resolved ``requested`` to a checkpoint it can read, or every rank to none.

    ``problem``: why this rank could not resolve it (a run on several nodes defers that error to here, so that the
    other nodes are not left waiting for this one at the rendezvous).
    """
    if strategy.world_size == 1 or requested is None:
        return
    mine = (None if resolved is None else str(resolved), resolved is not None and Path(resolved).exists(),
            strategy.node_rank, None if problem is None else str(problem))
    everyone = strategy.all_gather_object(mine)
    problems = {why for _, _, _, why in everyone}
    if problems == {None} and (all(exists for _, exists, _, _ in everyone) or not any(p for p, *_ in everyone)):
        return
    if len(problems) == 1 and problem is not None:  # the same refusal everywhere: the one a single node raises
        raise _every_rank(ConfigError(str(problem)))
    ranks = _grouped([(f"node {node}", _found(path, exists, why)) for path, exists, node, why in everyone])
    raise _every_rank(CheckpointError(f"ckpt_path={requested!r} resolved to different checkpoints on the ranks of "
                                      f"this run, so they would train from different places: {ranks}. Nothing was "
                                      f"loaded. Fix: {_FIX}"))


def check_same_position(strategy: Strategy, requested: Any, resolved: str | Path | None,
                        position: tuple[int, int, int]) -> None:
    """After loading: every rank restored the same ``(epoch, global_step, batches_in_epoch)``."""
    if strategy.world_size == 1 or requested is None:
        return
    everyone = strategy.all_gather_object((position, None if resolved is None else str(resolved)))
    if len({pos for pos, _ in everyone}) == 1:
        return
    ranks = _grouped([("", f"epoch {pos[0]}, step {pos[1]}, batch {pos[2]} from {path}") for pos, path in everyone])
    raise _every_rank(CheckpointError(f"ckpt_path={requested!r}: the ranks of this run loaded checkpoints of "
                                      f"different training positions ({ranks}): copies of the checkpoint on the "
                                      f"nodes differ. Fix: {_FIX}"))


def _grouped(described: list[tuple[str, str]]) -> str:
    """``rank 0 (node 0): X; ranks 2, 3 (node 1): Y``: ranks with the same description together (64 ranks stay
    readable)."""
    groups: dict[tuple[str, str], list[int]] = {}
    for rank, key in enumerate(described):
        groups.setdefault(key, []).append(rank)
    return "; ".join(f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
                     f"{f' ({where})' if where else ''}: {text}" for (where, text), ranks in groups.items())


def _found(path: str | None, exists: bool, why: str | None) -> str:
    if why is not None:
        return why
    if path is None:
        return "none found"
    return path if exists else f"{path} does not exist there"


_E = TypeVar("_E", CheckpointError, ConfigError)


def _every_rank(error: _E) -> _E:
    error.every_rank = True  # every rank raises it together: not one rank's failure that stops the others
    return error
