"""The Logger base class: metrics and hyperparameters to an experiment directory."""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

__all__ = ["Logger", "next_version"]

_PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]+")


def next_version(root: Path) -> int:
    """The next free ``version_N`` number under ``root``."""
    if not root.is_dir():
        return 0
    numbers = [int(m.group(1)) for p in root.iterdir() if (m := re.fullmatch(r"version_(\d+)", p.name))]
    return max(numbers, default=-1) + 1


class Logger(ABC):
    """Writes metrics of one run to ``save_dir/name/version_N``.

    Only global rank 0 writes; the Trainer makes every rank agree on the version. A resumed run continues in the
    version directory recorded in the checkpoint and first drops anything logged after the checkpoint's step, so
    steps are never duplicated.

    Args:
        save_dir: Root directory of all runs.
        name: Experiment name, a sub-directory of ``save_dir``.
        version: A fixed version (an int becomes ``version_N``, a str is used as the directory name).
    """

    def __init__(self, save_dir: str | os.PathLike[str] = ".", name: str = "xtrain_logs",
                 version: int | str | None = None) -> None:  # positional, as Lightning's: Logger("logs", "exp")
        self._save_dir = Path(save_dir)
        self._name = name
        self._version = version
        self._version_given = version is not None

    @property
    def name(self) -> str:
        return self._name

    @property
    def save_dir(self) -> Path:
        return self._save_dir

    @property
    def version(self) -> int | str:
        if self._version is None:
            self._version = next_version(self._save_dir / self._name)
        return self._version

    @property
    def log_dir(self) -> Path:
        """``save_dir/name/version_N``: where this run's logs (and by default its checkpoints) go."""
        version = self.version
        return self._save_dir / self._name / (version if isinstance(version, str) else f"version_{version}")

    def name_run(self, name: str) -> None:
        """Use ``name`` as this run's version (its directory) unless a version was given.

        ``ckpt_path="auto"`` calls it with the run's identity, so every restart of a run logs (and checkpoints)
        into the same directory instead of a new ``version_N``.
        """
        if not getattr(self, "_version_given", False):
            self._version = name

    @abstractmethod
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Record scalar metrics at a global step."""

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        """Record the run's hyperparameters."""

    def save(self) -> None:
        """Flush what is buffered to disk."""

    def after_save_checkpoint(self, path: Path) -> None:
        """A checkpoint was just written to ``path`` (global rank 0); trackers may upload it (``log_model``)."""

    def finalize(self, status: str) -> None:
        """The run ended with ``status`` (``"success"``, ``"failed"``, ``"interrupted"``); flush everything."""
        self.save()

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs to continue this run's logs."""
        return {"version": self.version, "name": self._name}

    def resume_problems(self, state: dict[str, Any]) -> list[str]:
        """What in ``state`` (read from a checkpoint file) :meth:`resume` cannot take, checked before anything of the
        checkpoint is loaded; an override extends the list. The version becomes a directory name, so it must be one
        plain name: a file must not make the run write outside ``save_dir/name``."""
        version = state.get("version")
        if version is None or (type(version) is int and version >= 0):
            return []
        if isinstance(version, str) and _PLAIN_NAME.fullmatch(version) and version not in (".", ".."):
            return []
        return [f"version {version!r} is not a version number or a plain directory name"]

    def resume(self, state: dict[str, Any], *, step: int) -> None:
        """Continue the run recorded in ``state``, dropping anything logged after the checkpoint was taken.

        Args:
            state: What :meth:`state_dict` returned when the checkpoint was written.
            step: The checkpoint's global step, for loggers that can only truncate by step.
        """
        if self.continues(state):
            self._version = state.get("version", self._version)

    def continues(self, state: dict[str, Any]) -> bool:
        """Whether resuming from ``state`` continues this logger's files: yes unless a ``version`` given to the
        logger names another run (then it logs there, and the checkpoint's run keeps its files as they are)."""
        return not getattr(self, "_version_given", False) or state.get("version") == self._version
