"""Portable optimizer state: keyed by parameter name, so it loads under any strategy and world size.

Strategies that produce optimizer state some other way (FSDP's sharded state dicts) use these to speak the same
format as :meth:`~xtrain.core.strategy.Strategy.optimizer_state_dict`.
"""

from __future__ import annotations

from xtrain.core._internal.state_dict import by_name, load_optimizer_state, mark_by_name, optimizer_state

__all__ = ["by_name", "load_optimizer_state", "mark_by_name", "optimizer_state"]
