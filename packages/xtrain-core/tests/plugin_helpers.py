"""What the plugin tests share: a quiet Trainer and the PluginWarnings a call gives."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from xtrain.core import Trainer
from xtrain.core.registry import PluginWarning

__all__ = ["Install", "auto_warnings", "plugin_warnings", "quiet_trainer"]

Install = Callable[..., Any]


def quiet_trainer(**kwargs: Any) -> Trainer:
    return Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                   **kwargs)


def plugin_warnings(make: Callable[[], Any]) -> tuple[Any, list[warnings.WarningMessage]]:
    """What ``make()`` returned, and the PluginWarnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made = make()
    return made, [w for w in caught if issubclass(w.category, PluginWarning)]


def auto_warnings() -> tuple[Trainer, list[str]]:
    """A default Trainer, and the texts of the PluginWarnings it gave."""
    trainer, caught = plugin_warnings(quiet_trainer)
    return trainer, [str(w.message) for w in caught]
