"""Errors for a plugin given in the wrong form or to the wrong argument, with the exact spelling that works.

``accelerator=FakecpuAccelerator`` (the class) asks for ``FakecpuAccelerator()`` or ``accelerator='fakecpu'``;
``plugins=["ddp"]`` (a strategy name) asks for ``strategy='ddp'``. Only names are read from the entry points here:
nothing is imported.
"""

from __future__ import annotations

from xtrain.core.accelerator import Accelerator
from xtrain.core.checkpoint_io import CheckpointIO
from xtrain.core.environment import ClusterEnvironment
from xtrain.core.errors import ConfigError
from xtrain.core.precision import Precision
from xtrain.core.registry import ACCELERATORS, CHECKPOINT_IO, ENVIRONMENTS, PRECISIONS, STRATEGIES, Registry
from xtrain.core.strategy import Strategy

__all__ = ["class_given", "name_of_other_kind"]


def _kinds() -> tuple[tuple[Registry[object], type, str], ...]:
    return ((ACCELERATORS, Accelerator, "an accelerator"), (STRATEGIES, Strategy, "a strategy"),
            (PRECISIONS, Precision, "a precision"), (CHECKPOINT_IO, CheckpointIO, "a checkpoint IO"),
            (ENVIRONMENTS, ClusterEnvironment, "a cluster environment"))


def _spell(argument: str, value: str) -> str:
    return f"plugins=[{value}]" if argument == "plugins" else f"{argument}={value}"


def class_given(argument: str, value: object) -> ConfigError | None:
    """The error for a plugin class passed where an instance (or a name) belongs; ``None`` for anything else."""
    if not isinstance(value, type):
        return None
    for registry, base, kind in _kinds():
        if issubclass(value, base):
            in_plugins = argument == "plugins" and base in (Precision, CheckpointIO, ClusterEnvironment)
            target = argument if in_plugins else registry.argument
            name = registry.name_for(value)
            where = "" if target == argument else f" It is {kind}, which goes to {_spell(target, '...')}."
            by_name = f", or its registered name: {_spell(target, repr(name))}" if name else ""
            return ConfigError(argument, value, f"is the class {value.__qualname__}, not an instance of it.{where}",
                               fix=f"pass an instance: {_spell(target, value.__qualname__ + '()')}{by_name}.")
    return None


def name_of_other_kind(argument: str, name: object) -> ConfigError | None:
    """The error for a name registered for another argument (``plugins=['ddp']``); ``None`` if there is none."""
    if not isinstance(name, str):
        return None
    for registry, _, kind in _kinds():
        if registry.argument != argument and name in registry:
            return ConfigError(argument, name, f"is the name of {kind} plugin "
                               f"({registry.distribution_of(name)}), which is passed to {registry.argument}=.",
                               fix=f"write {_spell(registry.argument, repr(name))}.")
    return None
