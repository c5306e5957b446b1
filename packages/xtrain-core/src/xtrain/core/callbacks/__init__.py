"""Built-in callbacks."""

from xtrain.core.callbacks.callback import Callback
from xtrain.core.callbacks.early_stopping import EarlyStopping
from xtrain.core.callbacks.model_checkpoint import ModelCheckpoint
from xtrain.core.callbacks.model_summary import ModelSummary
from xtrain.core.callbacks.progress import ProgressBar

__all__ = ["Callback", "EarlyStopping", "ModelCheckpoint", "ModelSummary", "ProgressBar"]
