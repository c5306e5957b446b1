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

__all__ = ["SaveConfigCallback"]


class SaveConfigCallback(Callback):
    """Write the resolved configuration to ``<log_dir>/<config_filename>`` on global rank 0 when a stage starts.

    For ``fit`` it is written at ``on_fit_start``, once a resumed run's loggers have moved into the checkpoint's run
    directory; there it replaces that run's earlier file (the resumed run goes on with this configuration).

    Subclass it and override :meth:`save_config` to also send the configuration elsewhere (a tracker, say); pass the
    subclass as ``XtrainCLI(save_config_callback=...)`` and its options as ``save_config_kwargs``.

    Args:
        parser: The jsonargparse parser that parsed ``config`` (it writes the YAML).
        config: The parsed configuration.
        config_filename: The file's name inside the log directory.
        overwrite: Replace a file of that name; without it an existing file stops the run (it belongs to another
            run that logged into the same directory).
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
    def setup(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        if stage != "fit":
            self._write(trainer, module, stage)

    @override
    def on_fit_start(self, trainer: Trainer, module: TrainModule) -> None:
        # After a resume has moved the loggers into the checkpoint's run directory (at setup, log_dir would name,
        # and create, a new version directory that the run then never uses).
        self._write(trainer, module, "fit")

    def _write(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        if self._saved:
            return
        if self.save_to_log_dir and trainer.is_global_zero:
            path = Path(trainer.log_dir) / self.config_filename
            # A resumed fit continues the run that wrote the file: its configuration is the one to keep now.
            resumed = stage == "fit" and trainer.ckpt_path is not None
            if path.exists() and not self.overwrite and not resumed:
                from xtrain.core.errors import ConfigError

                raise ConfigError("save_config_kwargs", {"overwrite": False}, f"{path} already exists (another run "
                                  "logged into the same directory); it is not replaced.",
                                  fix="delete it, pass save_config_kwargs={'overwrite': True}, or "
                                      "save_config_callback=None to save no config.")
            path.parent.mkdir(parents=True, exist_ok=True)
            with warnings.catch_warnings():  # newer jsonargparse renames skip_none; older ones lack the new name
                warnings.simplefilter("ignore", DeprecationWarning)
                self.parser.save(self.config, path, skip_none=False, overwrite=True, multifile=self.multifile)
            self.path = path
        self._saved = True
        self.save_config(trainer, module, stage)

    def save_config(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        """Called once after the file is written (on every rank): override to save the config somewhere else too."""
