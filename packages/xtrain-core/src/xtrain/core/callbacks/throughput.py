"""Training throughput: batches, samples and tokens per second, FLOP/s and model FLOPs utilisation (MFU)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from typing_extensions import override

from xtrain.core.callbacks.callback import Callback
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from torch.utils.flop_counter import FlopCounterMode

    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["ThroughputMonitor"]

_PRECISION_DTYPES = (("bf16", torch.bfloat16), ("64", torch.float64), ("16", torch.float16))


def _default_batch_size(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.ndim else 1
    if isinstance(batch, (list, tuple)) and batch:
        return _default_batch_size(batch[0])
    if isinstance(batch, dict) and batch:
        return _default_batch_size(next(iter(batch.values())))
    raise ConfigError("batch_size_fn", None, f"is needed: the size of a {type(batch).__name__} batch cannot be "
                      f"inferred.", fix="pass ThroughputMonitor(batch_size_fn=lambda batch: ...).")


class ThroughputMonitor(Callback):
    """Logs how fast training runs, per device and for the whole run.

    Counting costs nothing on the step path (the batch size is read from tensor shapes); time is taken, with the
    device synchronized, only on the logging steps (every ``log_every_n_steps``), where the ranks' counts are also
    summed. Keys: ``throughput/device/{batches,samples,items,flops}_per_sec`` for this rank,
    ``throughput/{samples,items,flops}_per_sec`` for all ranks together, ``throughput/mfu`` when the accelerator
    declares its peak FLOP/s (:meth:`~xtrain.core.Accelerator.peak_flops`), and ``throughput/samples`` in total.

    FLOPs per batch come from ``flops_per_batch`` or are measured once with :class:`torch.utils.flop_counter.
    FlopCounterMode` around the first training batch (forward and backward; the optimizer's arithmetic is not
    counted).

    Args:
        batch_size_fn: The number of samples in a batch (default: the first dimension of its first tensor).
        length_fn: The number of items (e.g. tokens) in a batch, for ``items_per_sec``.
        flops_per_batch: FLOPs of one training batch on one device; ``None`` measures them when ``measure_flops``.
        measure_flops: Measure FLOPs on the first batch.
        dtype: The dtype of the matrix math, for the peak FLOP/s (default: from the precision).
    """

    reads_gradients: ClassVar[bool] = False

    def __init__(self, batch_size_fn: Callable[[Any], int] | None = None, length_fn: Callable[[Any], int] | None = None,
                 *, flops_per_batch: float | None = None, measure_flops: bool = True,
                 dtype: torch.dtype | None = None) -> None:
        self.batch_size_fn = batch_size_fn or _default_batch_size
        self.length_fn = length_fn
        self.flops_per_batch = flops_per_batch
        self.measure_flops = measure_flops
        self.dtype = dtype
        self.last: dict[str, float] = {}
        self._counter: FlopCounterMode | None = None
        self._counts = [0, 0, 0]  # batches, samples, items since the last measurement
        self._total_samples = 0
        self._since = 0.0
        self._logged_step = -1

    def _synchronize(self, trainer: Trainer) -> None:
        if trainer.strategy.root_device.type != "cpu" and hasattr(torch, "accelerator"):
            torch.accelerator.synchronize(trainer.strategy.root_device)

    def _dtype(self, trainer: Trainer) -> torch.dtype:
        if self.dtype is not None:
            return self.dtype
        name = trainer.strategy.precision.name
        return next((dtype for key, dtype in _PRECISION_DTYPES if key in name), torch.float32)

    @override
    def on_train_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        self._synchronize(trainer)
        self._since = time.perf_counter()
        self._counts = [0, 0, 0]
        self._logged_step = trainer.global_step

    @override
    def on_train_batch_start(self, trainer: Trainer, module: TrainModule, batch: Any, batch_idx: int, /) -> None:
        if self.flops_per_batch is None and self.measure_flops and self._counter is None:
            from torch.utils.flop_counter import FlopCounterMode

            self._counter = FlopCounterMode(display=False)
            self._counter.__enter__()

    @override
    def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any,
                           batch_idx: int, /) -> None:
        if self._counter is not None and self.flops_per_batch is None:
            self._counter.__exit__(None, None, None)
            self.flops_per_batch = float(self._counter.get_total_flops())
        counts = self._counts
        counts[0] += 1
        counts[1] += self.batch_size_fn(batch)
        if self.length_fn is not None:
            counts[2] += self.length_fn(batch)
        step = trainer.global_step
        if step != self._logged_step and step % trainer.log_every_n_steps == 0:
            self._logged_step = step
            self._measure(trainer)

    @override
    def on_exception(self, trainer: Trainer, module: TrainModule, exception: BaseException, /) -> None:
        if self._counter is not None and self.flops_per_batch is None:
            self._counter.__exit__(None, None, None)

    def _measure(self, trainer: Trainer) -> None:
        self._synchronize(trainer)
        now = time.perf_counter()
        elapsed = max(now - self._since, 1e-9)
        batches, samples, items = self._counts
        flops = (self.flops_per_batch or 0.0) * batches
        local = torch.tensor([float(samples), float(items), flops], dtype=torch.float64)
        total = local.tolist()
        if trainer.world_size > 1:
            # Samples count once per data-parallel rank (tensor-parallel ranks share theirs); FLOPs on every rank.
            total[:2] = trainer.strategy.reduce_data_parallel(local[:2], "sum").cpu().tolist()
            if self.flops_per_batch:
                total[2] = float(trainer.strategy.reduce(local[2:], "sum").item())
        self._total_samples += int(total[0])
        values = {
            "throughput/device/batches_per_sec": batches / elapsed,
            "throughput/device/samples_per_sec": samples / elapsed,
            "throughput/samples_per_sec": total[0] / elapsed,
            "throughput/samples": float(self._total_samples),
            "throughput/world_size": float(trainer.world_size),
        }
        if self.length_fn is not None:
            values["throughput/device/items_per_sec"] = items / elapsed
            values["throughput/items_per_sec"] = total[1] / elapsed
        if self.flops_per_batch:
            values["throughput/device/flops_per_sec"] = flops / elapsed
            values["throughput/flops_per_sec"] = total[2] / elapsed
            strategy = trainer.strategy
            peak = strategy.accelerator.peak_flops(strategy.root_device, self._dtype(trainer))
            if peak:
                values["throughput/mfu"] = flops / elapsed / peak
        self.last = values
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(values, trainer._logged_step())  # on the row of the batch's metrics
        self._counts = [0, 0, 0]
        self._since = time.perf_counter()
