"""``CombinedLoader``: several dataloaders iterated as one, as Lightning's ``lightning.pytorch.utilities`` has it.

``fit`` combines a list or dict of training dataloaders by itself (``"max_size_cycle"``); a ``CombinedLoader``
chooses another mode, and scripts that iterate one by hand keep working.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from xtrain.core._internal.combined import Mode, check_mode, combined_length, flatten, iterate
from xtrain.core._internal.data import length

__all__ = ["CombinedLoader"]


class CombinedLoader(Iterable[tuple[Any, int, int]]):
    """Iterate a dict, list or tuple of dataloaders (or other iterables) together.

    Iterating yields ``(batch, batch_idx, dataloader_idx)``, as Lightning's. In the modes other than
    ``"sequential"`` the batch has the shape of ``iterables`` (``{"a": batch_a, "b": batch_b}`` for a dict) and
    ``dataloader_idx`` is 0.

    Args:
        iterables: The dataloaders, in a dict, list or tuple.
        mode: ``"min_size"`` stops with the shortest; ``"max_size_cycle"`` restarts the shorter ones until the
            longest ends; ``"max_size"`` gives ``None`` for the exhausted ones until the longest ends;
            ``"sequential"`` runs one loader after the other (for evaluation; ``fit`` refuses it, as Lightning).
    """

    def __init__(self, iterables: Any, mode: Mode = "min_size") -> None:
        self._iterables = iterables
        self._mode = check_mode(mode)
        self._flattened, self._shape = flatten(iterables)
        self._iterator: Iterator[tuple[Any, int, int]] | None = None

    @property
    def iterables(self) -> Any:
        """The iterables as given."""
        return self._iterables

    @property
    def mode(self) -> Mode:
        """How the iterables are combined."""
        return self._mode

    @property
    def flattened(self) -> list[Any]:
        """The iterables as a flat list (a dict's in key order)."""
        return list(self._flattened)

    def __iter__(self) -> CombinedLoader:
        shape, sequential = self._shape, self._mode == "sequential"
        self._iterator = ((batch if sequential else shape(batch), batch_idx, index)
                          for batch, batch_idx, index in iterate(self._flattened, self._mode))
        return self

    def __next__(self) -> tuple[Any, int, int]:
        if self._iterator is None:
            iter(self)
        assert self._iterator is not None
        return next(self._iterator)

    def __len__(self) -> int:
        """The number of batches in the mode's terms (the longest, the shortest or the sum of the lengths).

        Raises:
            TypeError: When an iterable has no length.
        """
        lengths = [length(it) for it in self._flattened]
        if any(n is None for n in lengths):
            raise TypeError("an iterable of this CombinedLoader has no length")
        return int(combined_length([n for n in lengths if n is not None], self._mode))

    def reset(self) -> None:
        """Drop the current iteration (the next ``iter()`` starts every iterable again)."""
        self._iterator = None
