"""Metrics and hyperparameters to TensorBoard event files (needs the ``tensorboard`` package)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from xtrain.core._internal.no_experiment import rank_zero_experiment
from xtrain.core.errors import ConfigError
from xtrain.core.loggers.logger import Logger, PathStr

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["TensorBoardLogger"]

_WRITER_KWARGS = ("comment", "filename_suffix", "flush_secs", "max_queue", "purge_step")  # SummaryWriter's


def _scalar_hparams(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in params.items()}


class TensorBoardLogger(Logger):
    """Writes event files to :attr:`log_dir`, read with ``tensorboard --logdir <save_dir>``.

    A resumed run purges events after the checkpoint's step, so curves continue without duplicate steps.

    Args:
        save_dir: Root directory of all runs.
        name: Experiment name, a sub-directory of ``save_dir``.
        version: A fixed version (an int becomes ``version_N``, a str is used as the directory name).
        log_graph: Let :meth:`log_graph` write the module's graph (traced with ``example_input_array``) to the
            GRAPHS tab; ``False`` (the default, as Lightning's) makes it do nothing, since tracing runs the model.
        default_hp_metric: With hyperparameters logged without metrics, log ``hp_metric = -1`` and register it as
            the HPARAMS tab's metric, as Lightning does (that tab shows no run without a metric); log your own
            ``hp_metric`` to fill it in, or pass ``False`` for no placeholder.
        prefix: Put ``prefix-`` before every metric name, as Lightning's ``prefix``.
        sub_dir: Write into ``save_dir/name/version/sub_dir`` (e.g. ``"train"``/``"val"`` runs shown side by side).
        comment: ``SummaryWriter``'s (used in the event file's name).
        filename_suffix: ``SummaryWriter``'s.
        purge_step: ``SummaryWriter``'s: events from this step on, left by an earlier run in the directory, are
            hidden (a resume sets it itself).
        max_queue: Taken for Lightning's configs; no effect (every event is written as it is logged).
        flush_secs: Taken for Lightning's configs; no effect.
        **kwargs: Refused with the valid names (``SummaryWriter`` takes no other keyword).
    """

    def __init__(self, save_dir: str | Path = ".", name: str = "xtrain_logs",
                 version: int | str | None = None, *, log_graph: bool = False, default_hp_metric: bool = True,
                 prefix: str = "", sub_dir: str | os.PathLike[str] | None = None, comment: str = "",
                 filename_suffix: str = "", purge_step: int | None = None, max_queue: int = 10, flush_secs: int = 120,
                 **kwargs: Any) -> None:  # positional, as Lightning's: Logger("logs", "exp")
        super().__init__(save_dir, name=name, version=version)
        self._writer: SummaryWriter | None = None
        self._purge_step = purge_step if purge_step is None else int(purge_step)
        self._log_graph = log_graph
        self._default_hp_metric = default_hp_metric
        self._prefix = prefix
        self._sub_dir = None if sub_dir is None else os.fspath(sub_dir)
        if kwargs:
            unknown = sorted(kwargs)[0]
            raise ConfigError(unknown, kwargs[unknown], "is not an argument of TensorBoardLogger nor of the "
                              "SummaryWriter it passes keywords to.", choices=_WRITER_KWARGS, fix=f"remove {unknown}=.")
        # Named, not **kwargs: jsonargparse takes in a config only the keywords a signature names (a Lightning
        # config.yaml lists all five).
        self._writer_kwargs = {"comment": comment, "filename_suffix": filename_suffix}

    @property
    def sub_dir(self) -> str | None:
        """The directory below the version directory that holds the event files, if one was given."""
        return self._sub_dir

    @property
    @override
    def log_dir(self) -> PathStr:
        """``save_dir/name/version_N`` (``/sub_dir`` when given): where the event files go."""
        base = self._version_dir()
        return PathStr(base if self._sub_dir is None else base / self._sub_dir)

    @property
    @rank_zero_experiment
    def experiment(self) -> SummaryWriter:
        """The ``SummaryWriter``, created on first use. It writes in the caller's thread (a writer thread woken
        for every logged step cost the training thread more, in GIL hand-offs, than the write itself); each event
        goes to the operating system as it is logged. On other ranks than global rank 0: an object on which every
        call does nothing (only rank 0 writes)."""
        if self._writer is None:
            try:
                from xtrain.core._internal.event_file import SyncSummaryWriter
            except ImportError:
                raise ConfigError("logger", "TensorBoardLogger", "needs the tensorboard package.",
                                  fix="pip install tensorboard") from None
            self._writer = SyncSummaryWriter(log_dir=str(self.log_dir), purge_step=self._purge_step,
                                             **self._writer_kwargs)
        return self._writer

    @override
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        # One event holding every value (TensorBoard reads each value of an event as its own scalar): add_scalar
        # would build and queue one event per key, about 36 us each.
        from tensorboard.compat.proto.summary_pb2 import Summary

        metrics = self._add_prefix(metrics)
        summary = Summary(value=[Summary.Value(tag=key, simple_value=float(value)) for key, value in metrics.items()])
        self.experiment._get_file_writer().add_summary(summary, step)

    @override
    def log_hyperparams(self, params: dict[str, Any], metrics: dict[str, float] | float | None = None,
                        step: int | None = None) -> None:
        """Record them in the event file (TensorBoard's HPARAMS tab) and in ``hparams.yaml`` beside it, as
        Lightning's TensorBoardLogger does (``load_from_checkpoint(hparams_file=...)`` reads it).

        Each call adds to what earlier calls recorded (a value given again replaces the old one), so values logged
        before ``fit`` stay beside the module's. ``metrics`` (a number means ``{"hp_metric": number}``) are logged
        at ``step`` and become the HPARAMS tab's metrics; without them, ``default_hp_metric`` logs
        ``hp_metric = -1``.
        """
        from torch.utils.tensorboard.summary import hparams

        merged = self._write_hparams_file(params)
        if metrics is None:
            metrics = {"hp_metric": -1} if self._default_hp_metric else {}
        elif not isinstance(metrics, dict):
            metrics = {"hp_metric": metrics}
        if metrics:
            self.log_metrics(metrics, 0 if step is None else step)
        writer = self.experiment._get_file_writer()
        for summary in hparams(_scalar_hparams(merged), metrics):
            writer.add_summary(summary, step)

    @override
    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Write ``model``'s graph, traced with ``input_array`` (default: ``model.example_input_array``), when the
        logger was created with ``log_graph=True``; the input is moved to the model's device first. The Trainer
        calls it at the start of each stage, as Lightning does."""
        if not self._log_graph:
            return
        import torch

        if input_array is None:
            input_array = getattr(model, "example_input_array", None)
        if input_array is None:
            warnings.warn("Could not log the computational graph to TensorBoard: the module's example_input_array is "
                          "not set and no input_array was given.", UserWarning, stacklevel=2)
            return
        if not isinstance(input_array, (torch.Tensor, tuple)):
            warnings.warn(f"Could not log the computational graph to TensorBoard: the input is a "
                          f"{type(input_array).__name__}, which cannot be traced; give a tensor, or a tuple of the "
                          f"positional arguments of forward().", UserWarning, stacklevel=2)
            return
        from contextlib import nullcontext

        from xtrain.core._internal.export import _exporting
        from xtrain.core.module import TrainModule

        device = next((p.device for p in model.parameters()), None) if isinstance(model, torch.nn.Module) else None
        if device is not None:
            from torch.utils._pytree import tree_map

            input_array = tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, input_array)
        # Tracing probes every attribute: a module outside a Trainer is traced as its exports are (its Trainer-only
        # properties answer instead of raising), in eval mode, and left in the modes it was in.
        with _exporting(model) if isinstance(model, TrainModule) else nullcontext():
            self.experiment.add_graph(model, input_array)

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
