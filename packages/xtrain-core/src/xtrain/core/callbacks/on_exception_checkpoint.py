"""Saving a checkpoint when training fails or is interrupted."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from typing_extensions import override

from xtrain.core.callbacks.callback import Callback

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["OnExceptionCheckpoint"]


class OnExceptionCheckpoint(Callback):
    """Writes ``<dirpath>/<filename>.ckpt`` when fitting raises (a bug, a KeyboardInterrupt), to inspect or resume.

    The checkpoint holds the state at the moment of the exception, which may be in the middle of a step: resuming
    from it is not guaranteed to be exact (the regular checkpoints, taken at save points, are). Saving needs every rank
    (it gathers their RNG states), so in multi-process runs, where a failing rank ends the others at once, it is only
    written by a single-process run; a warning says so otherwise.

    Args:
        dirpath: The directory to write into.
        filename: The file name without the ``.ckpt`` extension.
    """

    def __init__(self, dirpath: str | Path, filename: str = "on_exception") -> None:
        self.dirpath = Path(dirpath)
        self.filename = filename

    @property
    def ckpt_path(self) -> Path:
        """Where the checkpoint is written."""
        return self.dirpath / f"{self.filename}.ckpt"

    @override
    def on_exception(self, trainer: Trainer, module: TrainModule, exception: BaseException, /) -> None:
        if trainer.state != "fit":
            return
        if trainer.world_size > 1:
            warnings.warn(f"OnExceptionCheckpoint: not saving {self.ckpt_path} in a {trainer.world_size}-process run "
                          "(the other ranks are being ended); resume from the last regular checkpoint.",
                          UserWarning, stacklevel=2)
            return
        self.dirpath.mkdir(parents=True, exist_ok=True)
        trainer.save_checkpoint(self.ckpt_path)
