"""Built-in callbacks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xtrain.core._internal.lazy_names import lazy_getattr
from xtrain.core.callbacks.callback import Callback
from xtrain.core.callbacks.early_stopping import EarlyStopping, EarlyStoppingReason
from xtrain.core.callbacks.lr_monitor import LearningRateMonitor
from xtrain.core.callbacks.model_checkpoint import ModelCheckpoint
from xtrain.core.callbacks.model_summary import ModelSummary
from xtrain.core.callbacks.progress import ProgressBar

if TYPE_CHECKING:
    from xtrain.core.callbacks.device_stats import DeviceStatsMonitor
    from xtrain.core.callbacks.finetuning import BackboneFinetuning, BaseFinetuning
    from xtrain.core.callbacks.grad_accumulation import GradientAccumulationScheduler
    from xtrain.core.callbacks.lambda_callback import LambdaCallback
    from xtrain.core.callbacks.on_exception_checkpoint import OnExceptionCheckpoint
    from xtrain.core.callbacks.prediction_writer import BasePredictionWriter
    from xtrain.core.callbacks.rich_progress import RichProgressBar
    from xtrain.core.callbacks.spike_detection import SpikeDetection
    from xtrain.core.callbacks.swa import StochasticWeightAveraging
    from xtrain.core.callbacks.throughput import ThroughputMonitor
    from xtrain.core.callbacks.timer import Timer
    from xtrain.core.callbacks.weight_averaging import EMAWeightAveraging, WeightAveraging

__all__ = ["BackboneFinetuning", "BaseFinetuning", "BasePredictionWriter", "Callback", "DeviceStatsMonitor",
           "EMAWeightAveraging", "EarlyStopping", "EarlyStoppingReason", "GradientAccumulationScheduler",
           "LambdaCallback", "LearningRateMonitor", "ModelCheckpoint", "ModelSummary", "OnExceptionCheckpoint",
           "ProgressBar", "RichProgressBar", "SpikeDetection", "StochasticWeightAveraging", "ThroughputMonitor",
           "Timer", "WeightAveraging", "default_progress_bar"]

# Imported on first use, so that ``import xtrain.core`` stays fast (torch.optim.swa_utils, flop counting, ...).
_LAZY = {
    "BackboneFinetuning": "finetuning", "BaseFinetuning": "finetuning", "BasePredictionWriter": "prediction_writer",
    "DeviceStatsMonitor": "device_stats", "EMAWeightAveraging": "weight_averaging",
    "GradientAccumulationScheduler": "grad_accumulation", "LambdaCallback": "lambda_callback",
    "OnExceptionCheckpoint": "on_exception_checkpoint", "RichProgressBar": "rich_progress",
    "SpikeDetection": "spike_detection", "StochasticWeightAveraging": "swa", "ThroughputMonitor": "throughput",
    "Timer": "timer", "WeightAveraging": "weight_averaging",
}


def default_progress_bar() -> ProgressBar:
    """The rich progress bar when ``rich`` is installed, the plain one otherwise."""
    import importlib.util

    if importlib.util.find_spec("rich") is not None:
        from xtrain.core.callbacks.rich_progress import RichProgressBar

        return RichProgressBar()
    return ProgressBar()


__getattr__ = lazy_getattr(__name__, _LAZY)
