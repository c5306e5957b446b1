"""TrainModule: the user's model, its steps, its optimizers and its hooks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, ClassVar, Literal, Protocol

import torch
from torch import nn

from xtrain.core._internal.hparams import HyperparametersMixin
from xtrain.core._internal.module_api import ModuleApiMixin
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.callbacks import Callback
    from xtrain.core.trainer import Trainer

__all__ = ["TrainModule"]

class MetricLike(Protocol):
    """What ``self.log`` takes besides numbers: a torchmetrics ``Metric`` or ``MetricCollection`` (matched by shape,
    so that torchmetrics stays an optional install and a string or a list is still a type error)."""

    def compute(self) -> Any: ...
    def reset(self) -> None: ...


# The names listed are xtrain's; any string is typed in because Lightning's spellings ("avg", "MAX") work too.
ReduceFx = Literal["mean", "sum", "max", "min"] | str | Callable[..., Any]  # the torch function too, as in Lightning


class TrainModule(HyperparametersMixin, ModuleApiMixin, nn.Module):
    """Subclass this, write ``training_step`` and ``configure_optimizers``, and train it with any Trainer settings.

    The module never refers to devices, ranks or precision: the Trainer's strategy handles them, so the same module
    runs on a laptop CPU or many GPUs unchanged.

    Attributes:
        automatic_optimization: When ``False``, ``training_step`` calls ``self.optimizers()``,
            ``self.manual_backward(loss)`` and ``optimizer.step()`` itself.
        prepare_data_per_node: ``True`` (as Lightning): :meth:`prepare_data` runs on local rank 0 of every node
            (node-local disks); ``False``: on global rank 0 only (storage all nodes share, so it downloads once).
    """

    automatic_optimization: bool = True
    prepare_data_per_node: bool = True
    # Lightning's name of the checkpoint entry holding save_hyperparameters()'s values (on_load_checkpoint reads it)
    CHECKPOINT_HYPER_PARAMS_KEY: ClassVar[str] = "hyper_parameters"

    def __init__(self) -> None:
        super().__init__()
        self._trainer: Trainer | None = None

    # -- what users write ---------------------------------------------------------------------------------------
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | Mapping[str, Any] | None:
        """Compute and return the loss of one batch (or a dict with a ``"loss"`` key, or ``None`` to skip)."""
        raise NotImplementedError(f"{type(self).__name__} must implement training_step(self, batch, batch_idx).")

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        """Evaluate one validation batch; log metrics with ``self.log``."""
        return None

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        """Evaluate one test batch; log metrics with ``self.log``."""
        return None

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        """Return predictions for one batch; by default the forward pass on the batch (or its first element)."""
        inputs = batch[0] if isinstance(batch, (list, tuple)) else batch
        return self(inputs)

    def configure_optimizers(self) -> Any:
        """Return an optimizer, a list of them, ``(optimizers, schedulers)``, or a dict with ``"optimizer"`` and
        ``"lr_scheduler"`` (a scheduler or ``{"scheduler", "interval", "frequency", "monitor"}``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement configure_optimizers(self).")

    def training_step_end(self, step_output: Any) -> Any:
        """Combine ``training_step``'s outputs when one process runs it on several devices at once.

        Called only by strategies that split a batch across the devices of one process (``dp``, ``ddp2``): each
        tensor in ``step_output`` then holds one entry per device (a loss becomes a vector). Override it to compute
        something over the whole batch; the default returns the outputs unchanged and the strategy averages a
        per-device loss.
        """
        return step_output

    def configure_model(self) -> None:
        """Create or parallelize layers once the strategy has set up the processes (called once per module,
        before the strategy sets it up and before ``configure_optimizers``).

        Layers created here are built in the strategy's init context: on the meta device under
        ``model_parallel``, which materializes only each process's shards afterwards. Under ``model_parallel``,
        ``self.device_mesh`` is the named mesh to pass to ``parallelize_module`` and ``fully_shard``.
        """

    def configure_sharded_model(self) -> None:
        """Lightning's deprecated name of :meth:`configure_model`: an override is still called (before it, with a
        deprecation warning), and ``super().configure_sharded_model()`` works, as in Lightning."""

    def configure_callbacks(self) -> Sequence[Callback] | Callback:
        """Callbacks this module needs, added to the Trainer's (one, or a list or tuple of them)."""
        return []

    # -- hooks (no-ops; the Trainer calls only the ones a subclass overrides) --------------------------------------
    def prepare_data(self) -> None:
        """Download or write data once per node (local rank 0; once in all with ``prepare_data_per_node = False``),
        before ``setup``; the other processes wait for it. Set no state here: other processes do not run it."""

    def setup(self, stage: str) -> None: ...
    def teardown(self, stage: str) -> None: ...
    def on_fit_start(self) -> None: ...
    def on_fit_end(self) -> None: ...
    def on_train_start(self) -> None: ...
    def on_train_end(self) -> None: ...
    def on_train_epoch_start(self) -> None: ...
    def on_train_epoch_end(self) -> None: ...
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        """Return -1 to end the epoch here (the rest of its batches are skipped), as in Lightning."""
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None: ...
    def on_validation_start(self) -> None: ...
    def on_validation_end(self) -> None: ...
    def on_validation_epoch_start(self) -> None: ...
    def on_validation_epoch_end(self) -> None: ...
    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_start(self) -> None: ...
    def on_test_end(self) -> None: ...
    def on_test_epoch_start(self) -> None: ...
    def on_test_epoch_end(self) -> None: ...
    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_predict_start(self) -> None: ...
    def on_predict_end(self) -> None: ...
    def on_predict_epoch_start(self) -> None: ...
    def on_predict_epoch_end(self) -> None: ...
    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_before_backward(self, loss: torch.Tensor) -> None: ...
    def on_after_backward(self) -> None: ...
    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None: ...
    def on_before_zero_grad(self, optimizer: torch.optim.Optimizer) -> None: ...
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...

    # -- services -------------------------------------------------------------------------------------------------
    @property
    def trainer(self) -> Trainer:
        if self._trainer is None:
            raise RuntimeError(f"{type(self).__name__} is not attached to a Trainer; call trainer.fit(module) first.")
        return self._trainer

    @property
    def example_input_array(self) -> Any:
        """An input for ``forward`` (a tensor, tuple or dict), or ``None``: the model summary runs it for FLOPs and
        layer sizes, TensorBoard traces the graph with it, and the exports use it when given no input."""
        return self.__dict__.get("_example_input_array")

    @example_input_array.setter
    def example_input_array(self, value: Any) -> None:
        self.__dict__["_example_input_array"] = value

    @property
    def strict_loading(self) -> bool:
        """Whether restoring a checkpoint (``fit``/``validate``/... with ``ckpt_path``) requires every weight of the
        module and no other: set it to ``False`` where checkpoints hold only some weights (the trainable ones of a
        fine-tune), as in Lightning; ``load_from_checkpoint`` follows it unless given ``strict=``."""
        return bool(self.__dict__.get("_strict_loading", True))

    @strict_loading.setter
    def strict_loading(self, value: bool) -> None:
        self.__dict__["_strict_loading"] = value

    @property
    def on_gpu(self) -> bool:
        """Whether the module runs on a CUDA device."""
        return self.device.type == "cuda"

    @property
    def device(self) -> torch.device:
        if self._trainer is not None:
            return self._trainer.strategy.root_device
        param = next(self.parameters(), None)
        return param.device if param is not None else torch.device("cpu")

    @property
    def device_mesh(self) -> Any:
        """The strategy's named N-D device mesh (``model_parallel``), or ``None``; for ``configure_model``."""
        return self._trainer.strategy.device_mesh if self._trainer is not None else None

    @property
    def global_rank(self) -> int:
        return self._trainer.global_rank if self._trainer is not None else 0

    @property
    def current_epoch(self) -> int:
        return self._trainer.current_epoch if self._trainer is not None else 0

    @property
    def global_step(self) -> int:
        return self._trainer.global_step if self._trainer is not None else 0

    def log(self, name: str, value: torch.Tensor | float | int | MetricLike, *, prog_bar: bool = False, logger: bool = True,
            on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: ReduceFx = "mean",
            sync_dist: bool = False, batch_size: int | None = None, add_dataloader_idx: bool = True,
            rank_zero_only: bool = False) -> None:
        """Record a metric. Values stay tensors until a logger writes them: no per-step ``.item()`` or sync.

        Args:
            name: The metric's name.
            value: A scalar tensor, a number, or a torchmetrics ``Metric`` (computed over every rank's data at the
                epoch's end, then reset; see the metrics guide).
            prog_bar: Show it in the progress bar.
            logger: Send it to the loggers.
            on_step: Record this step's value (default: True in training, False in evaluation).
            on_epoch: Record the epoch's aggregate (default: False in training, True in evaluation).
            reduce_fx: How the epoch aggregate is formed: ``"mean"`` (weighted by ``batch_size``), ``"sum"``,
                ``"max"`` or ``"min"``; Lightning's spellings work too (any case, ``"avg"``, ``torch.mean``...).
            sync_dist: Reduce across ranks (a collective per use; only when asked).
            batch_size: Weight of this value in the epoch mean (default: inferred from the batch).
            add_dataloader_idx: With several validation/test dataloaders, log ``name/dataloader_idx_<i>`` from their
                steps (one value per dataloader, as in Lightning); ``False`` logs ``name`` for all of them together.
            rank_zero_only: The call is made on rank 0 only (as in Lightning): it must not ``sync_dist``, which
                would wait for the other ranks forever, and callbacks on other ranks cannot monitor the key.
        """
        trainer = self._trainer
        if trainer is None:
            return
        if rank_zero_only and sync_dist:
            _refuse_rank_zero_sync(name)
        trainer._metrics.log(name, value, prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist, batch_size,
                             add_dataloader_idx)

    def log_dict(self, values: Mapping[str, torch.Tensor | float | int | MetricLike] | MetricLike, *,
                 prog_bar: bool = False, logger: bool = True, on_step: bool | None = None, on_epoch: bool | None = None,
                 reduce_fx: ReduceFx = "mean", sync_dist: bool = False, batch_size: int | None = None,
                 add_dataloader_idx: bool = True, rank_zero_only: bool = False) -> None:
        """:meth:`log` for each item, with the same options (a torchmetrics ``MetricCollection`` too)."""
        items: Mapping[str, Any] = values  # type: ignore[assignment]  # a MetricCollection is a mapping of Metrics
        if rank_zero_only and sync_dist:
            _refuse_rank_zero_sync(", ".join(map(str, items)))
        if type(self).log is not TrainModule.log:  # an override of log sees every item, as in Lightning
            for name, value in items.items():
                self.log(name, value, prog_bar=prog_bar, logger=logger, on_step=on_step, on_epoch=on_epoch,
                         reduce_fx=reduce_fx, sync_dist=sync_dist, batch_size=batch_size,
                         add_dataloader_idx=add_dataloader_idx, rank_zero_only=rank_zero_only)
            return
        trainer = self._trainer
        if trainer is None:
            return
        log = trainer._metrics.log
        for name, value in items.items():
            log(name, value, prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist, batch_size, add_dataloader_idx)

    def optimizers(self, *, use_pl_optimizer: bool = True) -> Any:
        """The optimizer(s) from ``configure_optimizers``, for manual optimization.

        Their ``step()`` goes through the strategy and its precision: gradients are unscaled under ``16-mixed`` and a
        step with non-finite gradients is skipped (``step()`` returns ``False``), exactly as in automatic
        optimization; ``step(closure=...)`` returns the closure's loss, and ``on_before_optimizer_step`` runs before
        each step, as in Lightning.

        Args:
            use_pl_optimizer: ``False`` returns the plain ``torch.optim.Optimizer`` objects (Lightning's option): their
                ``step`` bypasses the precision plugin, the hooks and the ``global_step`` count.
        """
        optimizers = self.trainer._strategy_optimizers() if use_pl_optimizer else self.trainer.optimizers
        return optimizers[0] if len(optimizers) == 1 else optimizers

    def lr_schedulers(self) -> Any:
        """The LR scheduler(s), for manual optimization."""
        schedulers = [config.scheduler for config in self.trainer.lr_scheduler_configs]
        return None if not schedulers else schedulers[0] if len(schedulers) == 1 else schedulers

    def clip_gradients(self, optimizer: Any, gradient_clip_val: float,
                       gradient_clip_algorithm: Literal["norm", "value"] = "norm") -> torch.Tensor | None:
        """Clip the gradients of ``optimizer``'s parameters (unscaled first), for manual optimization."""
        raw = getattr(optimizer, "optimizer", optimizer)
        return self.trainer.strategy.clip_gradients(raw, value=gradient_clip_val, algorithm=gradient_clip_algorithm)

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Backward pass through the strategy (gradient scaling, DDP sync); use instead of ``loss.backward()``.

        Calls ``on_before_backward`` and ``on_after_backward`` around it, as Lightning does. ``args``/``kwargs`` go
        to ``loss.backward`` (``retain_graph=True`` for a second backward through the same graph).
        """
        self.trainer._manual_backward(loss, *args, **kwargs)

    # -- export ------------------------------------------------------------------------------------------------------
    # TorchScript must neither compile nor read the framework's (Trainer-backed) properties: every property of
    # TrainModule and its bases (mixins included), filled in below the class.
    __jit_unused_properties__: ClassVar[list[str]]
    __jit_ignored_attributes__: ClassVar[list[str]]

    def to_onnx(self, file_path: str | Path | BinaryIO | None = None, input_sample: Any = None, **kwargs: Any) -> Any:
        """Export to ONNX through ``torch.export`` (``pip install "xtrain-core[onnx]"``), in eval mode; ``kwargs`` go
        to ``torch.onnx.export``. ``input_sample`` defaults to ``self.example_input_array``. As Lightning's:
        ``file_path`` may be a file object or ``None`` (nothing written), and the ``ONNXProgram`` is returned."""
        from xtrain.core._internal.export import to_onnx

        return to_onnx(self, file_path, input_sample, **kwargs)

    def to_torchscript(self, file_path: str | Path | None = None, method: Literal["script", "trace"] = "script",
                       example_inputs: Any = None, **kwargs: Any) -> torch.jit.ScriptModule:
        """Compile with ``torch.jit.script`` (or ``trace``), saved to ``file_path`` when given. TorchScript is in
        maintenance; ``torch.export.export(module, args)`` is the modern path (see the export guide)."""
        from xtrain.core._internal.export import to_torchscript

        return to_torchscript(self, file_path, method, example_inputs, **kwargs)


def _refuse_rank_zero_sync(name: str) -> None:
    raise ConfigError("sync_dist", True, f"self.log({name!r}, ..., rank_zero_only=True) is called on rank 0 only, and "
                      "sync_dist=True would wait for the other ranks, which never call it.",
                      fix="drop sync_dist=True (or log from every rank without rank_zero_only).")


TrainModule.__jit_unused_properties__ = TrainModule.__jit_ignored_attributes__ = sorted(
    {name for cls in TrainModule.__mro__ for name, value in vars(cls).items() if isinstance(value, property)})
