"""The error types users see.

There is one configuration error type so that every invalid combination of Trainer or Engine arguments can be
caught with one ``except`` clause, and so that tests can assert "this was refused before anything started".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

__all__ = ["CheckpointError", "CollectiveMismatchError", "ConfigError", "NonFiniteLossError", "RankFailedError",
           "SIGTERMException", "XtrainDeprecationWarning", "format_choices"]


def format_choices(choices: Iterable[object]) -> str:
    """Render valid choices the same way in every message: sorted, quoted, comma separated."""
    items = sorted({repr(c) for c in choices})
    return ", ".join(items) if items else "(none installed)"


_MESSAGE_ONLY: object = object()


class ConfigError(ValueError):
    """An invalid argument, raised before any process starts or any training begins.

    The message always names the argument, shows the value with ``!r``, lists the valid choices where there is a
    finite set of them, and says how to fix it (including the exact ``pip install`` line when a package is missing).

    ``ConfigError(message)`` with the message alone is accepted too, and keeps the message as it is: Lightning code
    raises ``MisconfigurationException(message)``, which ``xtrain migrate`` turns into this class, and a migrated
    script must still raise (and catch) it. A ConfigError that crossed a process boundary is rebuilt that way.

    Attributes:
        every_rank: Every rank of the run raises it together (on several nodes, a ``ckpt_path`` no node can
            resolve is refused once all have joined): it is not one rank's failure that stops the others.
    """

    every_rank: bool = False

    def __init__(self, argument: str, value: object = _MESSAGE_ONLY, problem: str = "", *,
                 choices: Iterable[object] | None = None, fix: str | None = None) -> None:
        self.argument = argument
        self.value = value
        self.choices = tuple(choices) if choices is not None else None
        self.fix = fix
        if value is _MESSAGE_ONLY:
            self.argument, self.value = "", None
            super().__init__(argument)
            return
        parts = [f"{argument}={value!r}: {problem}"]
        if self.choices is not None:
            parts.append(f"Valid choices: {format_choices(self.choices)}.")
        if fix:
            parts.append(f"Fix: {fix}")
        super().__init__(" ".join(parts))


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read: missing, truncated, corrupted, unsafe, or from an incompatible layout.

    The message names the file and what to do, instead of surfacing a pickle or zip traceback.

    Attributes:
        every_rank: Every rank of the run raises it together (the ranks resolved different checkpoints, found by a
            gather): it is not one rank's failure that stops the others.
    """

    every_rank: bool = False


class CollectiveMismatchError(RuntimeError):
    """Ranks were about to run different collectives (``XTRAIN_COLLECTIVE_CHECK=1``), raised on every rank.

    The message lists each rank's collective, tensor dtype and shape, and the file:line of user code that called it.
    """


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or inf under ``on_nonfinite_loss="raise"``.

    Raised on every rank before the backward pass of that loss, so the weights and the checkpoints on disk are the
    last good ones. The message names the step, epoch and batch.

    Attributes:
        every_rank: The ranks agreed on it (one flag per rank gathered): every rank raises it at the same step, so
            it is not one rank's failure that stops the others, and each rank's ``except`` sees it.
    """

    every_rank: bool = False


class RankFailedError(RuntimeError):
    """Another rank of a distributed run failed; carries that rank's number and traceback."""

    def __init__(self, rank: int, details: str) -> None:
        self.rank = rank
        self.details = details
        super().__init__(f"rank {rank} failed:\n{details}")


class SIGTERMException(SystemExit):
    """``fit`` was stopped by SIGTERM (a scheduler preempting or draining the job); exits with code 143.

    Raised from ``fit`` after the checkpoint the signal asked for (``last.ckpt``, at the next save point, agreed by
    every rank) or, when the signal came before training started (setup, sanity check), right away. A ``SystemExit``
    as in Lightning: the script stops there, so a preempted run is not tested or exported as a finished one, and a
    scheduler sees 143 (128 + SIGTERM), not the 0 of a completed job it would not restart. ``on_exception`` sees it;
    catch it to do otherwise.
    """

    exit_code: ClassVar[int] = 143  # 128 + SIGTERM, what a shell reports for a process ended by it

    def __init__(self) -> None:
        super().__init__(self.exit_code)


class XtrainDeprecationWarning(DeprecationWarning):
    """Warns about an xtrain API that will be removed; the message names the ``since`` and ``removal`` versions."""
