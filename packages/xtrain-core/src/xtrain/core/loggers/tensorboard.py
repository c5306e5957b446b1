"""Metrics and hyperparameters to TensorBoard event files (needs the ``tensorboard`` package)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.core.loggers.logger import Logger

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["TensorBoardLogger"]


def _scalar_hparams(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in params.items()}


class TensorBoardLogger(Logger):
    """Writes event files to :attr:`log_dir`, read with ``tensorboard --logdir <save_dir>``.

    A resumed run purges events after the checkpoint's step, so curves continue without duplicate steps.
    """

    def __init__(self, save_dir: str | Path = ".", name: str = "xtrain_logs",
                 version: int | str | None = None) -> None:  # positional, as Lightning's: Logger("logs", "exp")
        super().__init__(save_dir, name=name, version=version)
        self._writer: SummaryWriter | None = None
        self._purge_step: int | None = None

    @property
    def experiment(self) -> SummaryWriter:
        """The ``SummaryWriter``, created on first use. It writes in the caller's thread (a writer thread woken
        for every logged step cost the training thread more, in GIL hand-offs, than the write itself); each event
        goes to the operating system as it is logged."""
        if self._writer is None:
            try:
                from xtrain.core._internal.event_file import SyncSummaryWriter
            except ImportError:
                raise ConfigError("logger", "TensorBoardLogger", "needs the tensorboard package.",
                                  fix="pip install tensorboard") from None
            self._writer = SyncSummaryWriter(log_dir=str(self.log_dir), purge_step=self._purge_step)
        return self._writer

    @override
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        # One event holding every value (TensorBoard reads each value of an event as its own scalar): add_scalar
        # would build and queue one event per key, about 36 us each.
        from tensorboard.compat.proto.summary_pb2 import Summary

        summary = Summary(value=[Summary.Value(tag=key, simple_value=float(value)) for key, value in metrics.items()])
        self.experiment._get_file_writer().add_summary(summary, step)

    @override
    def log_hyperparams(self, params: dict[str, Any]) -> None:
        """Record them in the event file (TensorBoard's HPARAMS tab) and in ``hparams.yaml`` beside it, as
        Lightning's TensorBoardLogger does (``load_from_checkpoint(hparams_file=...)`` reads it)."""
        from torch.utils.tensorboard.summary import hparams

        from xtrain.core._internal.hparams_file import write_hparams_yaml

        write_hparams_yaml(self.log_dir / "hparams.yaml", params)
        writer = self.experiment
        for summary in hparams(_scalar_hparams(params), {}):
            writer._get_file_writer().add_summary(summary)

    @override
    def save(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    @override
    def finalize(self, status: str) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None

    @override
    def resume(self, state: dict[str, Any], *, step: int) -> None:
        super().resume(state, step=step)
        self._purge_step = step + 1
