"""``ckpt_path="best"`` in a new process: the best path recorded by ModelCheckpoint in the run's newest ``last``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from xtrain.core.errors import CheckpointError

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

__all__ = ["best_from_last_checkpoint", "default_ckpt_path"]


def best_from_last_checkpoint(trainer: Trainer) -> tuple[str | None, list[str]]:
    """The ``best_model_path`` saved in the newest ``last`` checkpoint file, when it still exists; with it, why each
    best path a ``last`` file named was not taken (for the error when there is none).

    Both the file read and the path it names must be files a ModelCheckpoint of ``trainer`` writes in that folder
    (its ``filename`` template or ``last``): a user's ``backbone.ckpt`` beside the checkpoints is neither read as
    the run's state nor loaded as its best, whatever a state in another file says.
    """
    from xtrain.core.defaults.torch_io import read_checkpoint_file

    callbacks = trainer.checkpoint_callbacks
    candidates = {Path(p) for cb in callbacks for p in cb.last_checkpoint_candidates(trainer)}
    files = sorted((p for p in candidates if p.is_file() and any(cb.writes(p, p.parent) for cb in callbacks)),
                   key=lambda p: p.stat().st_mtime_ns, reverse=True)
    keys = {cb.state_key for cb in callbacks}
    passed: list[str] = []
    for file in files:
        try:
            states = read_checkpoint_file(file).get("callbacks", {})
        except CheckpointError as err:
            passed.append(f"{str(file)!r} could not be read ({str(err)[:160]})")
            continue
        if not isinstance(states, dict):
            continue
        ordered = sorted(states.items(), key=lambda kv: str(kv[0]) not in keys)
        for key, state in ordered:
            best = state.get("best_model_path") if str(key).startswith("ModelCheckpoint") and \
                isinstance(state, dict) else None
            if not isinstance(best, str) or not best:
                continue
            if not Path(best).exists():
                passed.append(f"{str(file)!r} names {best!r} as the best, which no longer exists")
            elif not any(cb.writes(best, file.parent) for cb in callbacks):
                passed.append(f"{str(file)!r} names {best!r} as the best, which is not a file a ModelCheckpoint "
                              f"of this Trainer writes in {str(file.parent)!r}, so it is not loaded")
            else:
                return best, []
    return None, passed


def default_ckpt_path(trainer: Trainer, model: Any, ckpt_path: str | Path | None) -> str | Path | None:
    """``validate``/``test``/``predict`` without a model after a ``fit`` (also with other stages in between): the best
    checkpoint of that fit, as in Lightning. With a model, or without a best checkpoint, the current weights (where
    Lightning raises)."""
    if ckpt_path is not None or model is not None:
        return ckpt_path
    return "best" if any(cb.best_model_path for cb in trainer.checkpoint_callbacks) else None
