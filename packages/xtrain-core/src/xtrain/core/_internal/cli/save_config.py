"""Saving the parsed configuration of ``XtrainCLI`` / ``xtrain fit`` beside the run's logs, so a run can be repeated."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from xtrain.core.callbacks.callback import Callback

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["CommandSaveConfigCallback", "SaveConfigCallback", "source_files"]


class SaveConfigCallback(Callback):
    """Write the resolved configuration to ``<log_dir>/<config_filename>`` on global rank 0 when a stage starts.

    For ``fit`` it is written at ``on_fit_start``, once a resumed run's loggers have moved into the checkpoint's run
    directory; there it replaces that run's earlier file (the resumed run goes on with this configuration).

    A config file the run was read from (a ``--config`` file, or a nested one) is never replaced, ``overwrite`` or
    not: without a logger the log directory is ``default_root_dir`` (the working directory by default), where the
    user's own ``config.yaml`` usually is. Every rank refuses together, before training starts.

    Subclass it and override :meth:`save_config` to also send the configuration elsewhere (a tracker, say); pass the
    subclass as ``XtrainCLI(save_config_callback=...)`` and its options as ``save_config_kwargs``.

    Args:
        parser: The jsonargparse parser that parsed ``config`` (it writes the YAML).
        config: The parsed configuration.
        config_filename: The file's name inside the log directory.
        overwrite: Replace a file of that name; without it an existing file stops the run (it belongs to another
            run that logged into the same directory, or to the user). Never a file the run was read from.
        multifile: Write nested configs to files of their own, as ``parser.save(multifile=True)`` does.
        save_to_log_dir: Write the file at all (``False`` leaves only :meth:`save_config`).
    """

    def __init__(self, parser: Any, config: Any, *, config_filename: str = "config.yaml", overwrite: bool = False,
                 multifile: bool = False, save_to_log_dir: bool = True) -> None:
        self.parser, self.config = parser, config
        self.config_filename, self.overwrite, self.multifile = config_filename, overwrite, multifile
        self.save_to_log_dir = save_to_log_dir
        self.path: Path | None = None
        self._saved = False

    @property
    @override
    def state_key(self) -> str:
        return "SaveConfigCallback"

    @override
    def setup(self, trainer: Trainer, module: TrainModule, stage: str, /) -> None:
        if stage != "fit":
            self._write(trainer, module, stage)

    @override
    def on_fit_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        # After a resume has moved the loggers into the checkpoint's run directory (at setup, log_dir would name,
        # and create, a new version directory that the run then never uses).
        self._write(trainer, module, "fit")

    def _write(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        if self._saved:
            return
        if self.save_to_log_dir:
            # Decided on rank 0 (the rank that writes) and sent to all, so that every rank stops, not rank 0 alone.
            # A resumed fit continues the run that wrote the file: its configuration is the one to keep now.
            resumed = stage == "fit" and trainer.ckpt_path is not None
            refusal = self._refusal(trainer, resumed=resumed) if trainer.is_global_zero else None
            _raise(trainer.strategy.broadcast(refusal))
        if self.save_to_log_dir and trainer.is_global_zero:
            path = Path(trainer.log_dir) / self.config_filename
            path.parent.mkdir(parents=True, exist_ok=True)
            with warnings.catch_warnings():  # newer jsonargparse renames skip_none; older ones lack the new name
                warnings.simplefilter("ignore", DeprecationWarning)
                self.parser.save(self.config, path, skip_none=False, overwrite=True, multifile=self.multifile)
            self.path = path
        self._saved = True
        self.save_config(trainer, module, stage)

    def check_before_launch(self, trainer: Trainer, *, resumed: bool) -> None:
        """Refuse now, in the launching process, what the stage would refuse later (on every rank).

        Only a run without a logger: its log directory is ``default_root_dir``, known before the run starts, where a
        logger's version directory would be created by asking for it.
        """
        if self.save_to_log_dir and not trainer.loggers:
            _raise(self._refusal(trainer, resumed=resumed))

    def _refusal(self, trainer: Trainer, *, resumed: bool) -> tuple[str, object, str, str] | None:
        """Why the file must not be written, as ``ConfigError`` arguments (a tuple crosses ranks intact), or None."""
        log_dir = Path(trainer.log_dir)
        targets = [log_dir / self.config_filename]
        if self.multifile:  # nested configs are written under their own file names, beside the main one
            targets += [log_dir / source.name for source in _nested_files(self.config)]
        sources = set(source_files(self.config))
        for target in targets:
            if target.resolve() in sources:
                return self._refusal_args(trainer, target, f"{target} is a config file this run was read from; the "
                                          "resolved configuration would replace it (comments and all), so it is not "
                                          "written.", read_from=True)
        if self.overwrite or resumed:
            return None
        for target in targets:
            if target.exists():
                return self._refusal_args(trainer, target, f"{target} already exists (an earlier run's, or a file "
                                          "of your own); it is not replaced.", read_from=False)
        return None

    def _refusal_args(self, trainer: Trainer, path: Path, problem: str, *,
                      read_from: bool) -> tuple[str, object, str, str]:
        """The argument that decides where ``path`` is written, its value, and the fix, for a script's XtrainCLI.

        ``read_from``: ``path`` is one of the run's own config files, which is never to be deleted or overwritten.
        """
        elsewhere = ("log this run into a directory of its own (a logger, or another Trainer(default_root_dir=...)), "
                     "or pass save_config_kwargs={'config_filename': 'resolved.yaml'}")
        if read_from:
            fix = f"{elsewhere}."
        else:
            fix = (f"delete or move {path.name}, {elsewhere} or {{'overwrite': True}}, or save_config_callback=None "
                   "to save no config.")
        return "save_config_kwargs", {"config_filename": self.config_filename, "overwrite": self.overwrite}, problem, fix

    def save_config(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        """Called once after the file is written (on every rank): override to save the config somewhere else too."""


class CommandSaveConfigCallback(SaveConfigCallback):
    """The ``xtrain`` command's callback: its refusals give the command's options as the fix.

    The command has no ``save_config_kwargs``; a run gets a directory of its own from a logger (each run writes into
    a new version directory) or from ``--trainer.default_root_dir``.
    """

    @override
    def _refusal_args(self, trainer: Trainer, path: Path, problem: str, *,
                      read_from: bool) -> tuple[str, object, str, str]:
        argument = "trainer.logger" if trainer.loggers else "trainer.default_root_dir"
        fix = ("give the run a directory of its own: --trainer.default_root_dir runs/<name>, or turn a logger on "
               "(--trainer.logger true; every run then logs into a new version directory)")
        return argument, str(path.parent), problem, fix + ("." if read_from else f"; or delete or move {path.name} "
                                                                                  "if an earlier run wrote it.")


def _raise(refusal: tuple[str, object, str, str] | None) -> None:
    if refusal is not None:
        from xtrain.core.errors import ConfigError

        argument, value, problem, fix = refusal
        raise ConfigError(argument, value, problem, fix=fix)


def source_files(config: Any) -> list[Path]:
    """The resolved paths of every config file ``config`` was read from: ``--config`` files and nested ones."""
    found = [Path(str(item.absolute)) for item in (config.get("config") or []) if getattr(item, "absolute", None)]
    return [path.resolve() for path in [*found, *_nested_files(config)]]


def _nested_files(config: Any) -> list[Path]:
    """The files that parts of ``config`` were read from (``model: model.yaml``), which jsonargparse records."""
    return [Path(str(value.absolute)) for key, value in config.items()
            if key.endswith("__path__") and getattr(value, "absolute", None)]
