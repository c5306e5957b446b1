"""The Logger base class: metrics and hyperparameters to an experiment directory."""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any, TypeVar

__all__ = ["Logger", "PathStr", "add_prefix", "next_version"]

_PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]+")
_V = TypeVar("_V")


class PathStr(str):
    """A directory path that is a ``str`` and still answers what ``pathlib.Path`` answers.

    Lightning's loggers return ``log_dir``/``save_dir`` as ``str`` and scripts write ``logger.log_dir + "/x"`` or
    ``os.path.join(logger.log_dir, ...)``; xtrain 1.x returned a ``Path`` and its users (and some of xtrain's own
    callers) write ``logger.log_dir / "x"`` or ``logger.log_dir.glob(...)``. This value serves both: string
    operations (``+``, ``replace``, ``split``, ``==`` with a ``str``) are ``str``'s, ``/`` gives a ``Path``, any
    other ``Path`` attribute is ``Path(self)``'s, and it equals the ``Path`` of the same location.
    """

    __slots__ = ()

    def __truediv__(self, other: str | os.PathLike[str]) -> Path:
        return Path(self) / other

    def __fspath__(self) -> str:
        return str.__str__(self)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # pickle, copy and friends probe dunders: they are str's business
            raise AttributeError(name)
        return getattr(Path(self), name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PurePath):
            return Path(self) == other
        return str.__eq__(self, other) is True

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = str.__hash__

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as a plain ``str``: a checkpoint (``weights_only`` loading) or another process needs no xtrain
        class to read it."""
        return (str, (str.__str__(self),))


def add_prefix(metrics: Mapping[str, _V], prefix: str, separator: str = "-") -> dict[str, _V]:
    """``metrics`` with ``prefix + separator`` before every key (as Lightning's loggers' ``prefix`` argument)."""
    if not prefix:
        return dict(metrics)
    return {f"{prefix}{separator}{key}": value for key, value in metrics.items()}


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

    ``save_dir``, ``root_dir`` and ``log_dir`` are :class:`PathStr` values: ``str`` as in Lightning, with ``Path``'s
    operators kept for xtrain 1.x code.
    """

    LOGGER_JOIN_CHAR = "-"
    _prefix: str = ""

    def __init__(self, save_dir: str | os.PathLike[str] = ".", name: str = "xtrain_logs",
                 version: int | str | None = None) -> None:  # positional, as Lightning's: Logger("logs", "exp")
        self._save_dir = Path(save_dir)
        self._name = name
        self._version = version
        self._version_given = version is not None
        self._hparams: dict[str, Any] = {}  # what log_hyperparams recorded, for loggers that write hparams.yaml

    @property
    def name(self) -> str:
        return self._name

    @property
    def save_dir(self) -> PathStr:
        """The root directory of all runs."""
        return PathStr(self._save_dir)

    @property
    def root_dir(self) -> PathStr:
        """``save_dir/name``: the parent of every version directory of this experiment."""
        return PathStr(self._save_dir / self._name)

    @property
    def version(self) -> int | str:
        if self._version is None:
            self._version = next_version(self._save_dir / self._name)
        return self._version

    @property
    def log_dir(self) -> PathStr:
        """``save_dir/name/version_N``: where this run's logs go (see :attr:`run_dir`)."""
        return PathStr(self._version_dir())

    @property
    def run_dir(self) -> PathStr:
        """This run's directory, where checkpoints go by default: :attr:`log_dir`, or its parent for a logger that
        writes into a sub-directory of the run (``TensorBoardLogger(sub_dir=...)``), as in Lightning."""
        return PathStr(self._version_dir())

    def _version_dir(self) -> Path:
        version = self.version
        return self._save_dir / self._name / (version if isinstance(version, str) else f"version_{version}")

    def _add_prefix(self, metrics: Mapping[str, _V]) -> dict[str, _V]:
        """The keys as this logger stores them: ``prefix-key`` when the logger was given a ``prefix``."""
        return add_prefix(metrics, self._prefix, self.LOGGER_JOIN_CHAR)

    def name_run(self, name: str) -> None:
        """Use ``name`` as this run's version (its directory) unless a version was given.

        ``ckpt_path="auto"`` calls it with the run's identity, so every restart of a run logs (and checkpoints)
        into the same directory instead of a new ``version_N``.
        """
        if not getattr(self, "_version_given", False):
            self._version = name

    def claim_version(self) -> Path | None:
        """Take the next free ``version_N`` by creating its directory, when this run has no version yet; returns the
        directory created (``None`` when a version was given, restored or named, or a subclass names its runs).

        Counting the directories on disk alone, as Lightning does, gives runs that start together on one root (sweep
        workers, an Optuna study with ``n_jobs>1``) the same number, and they write into each other's logs and
        checkpoints. ``mkdir`` succeeds for one of them only; the others count again.
        """
        if self._version is not None or type(self).version is not Logger.version:
            return None
        root = self._save_dir / self._name
        try:
            root.mkdir(parents=True, exist_ok=True)
            while True:
                number = next_version(root)
                try:
                    (root / f"version_{number}").mkdir()
                except FileExistsError:
                    continue
                self._version = number
                return root / f"version_{number}"
        except OSError:
            return None  # a root it cannot write to: the first write says so, as before

    @abstractmethod
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Record scalar metrics at a global step."""

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        """Record the run's hyperparameters."""

    def _write_hparams_file(self, params: dict[str, Any]) -> dict[str, Any]:
        """Add ``params`` to the hyperparameters recorded so far (a value given again replaces the old one, as in
        Lightning: values logged before ``fit`` stay beside the module's) and write them all to
        ``log_dir/hparams.yaml`` (``load_from_checkpoint(hparams_file=...)`` reads it); returns them all."""
        from xtrain.core._internal.hparams_file import write_hparams_yaml

        self._hparams.update(params)
        write_hparams_yaml(Path(self.log_dir) / "hparams.yaml", self._hparams)
        return self._hparams

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Record the model's computational graph (loggers that can draw one override this; the rest ignore it)."""

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
