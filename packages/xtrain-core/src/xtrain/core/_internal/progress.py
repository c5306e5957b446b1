"""Where the fit loop is, as plain counters a checkpoint can hold."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["FitProgress"]


@dataclass(slots=True)
class FitProgress:
    """Counters of the fit loop.

    ``batches_in_epoch > 0`` after a restore means the checkpoint was taken mid-epoch: the loop continues that epoch
    after the consumed batches instead of starting a new one.
    """

    epoch: int = 0
    global_step: int = 0
    batches_in_epoch: int = 0
    total_batches: int = 0

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            if hasattr(self, key):
                setattr(self, key, int(value))

    def checkpoint_epoch(self) -> int:
        """The epoch a checkpoint taken now belongs to (as in Lightning's ``"epoch"`` entry and the file names):
        the epoch just completed at an epoch boundary, else the running one."""
        return self.epoch - 1 if self.batches_in_epoch == 0 and self.epoch > 0 else self.epoch
