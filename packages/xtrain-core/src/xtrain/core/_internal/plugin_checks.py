"""The data a plugin class declares, checked when the registry loads it.

The validator decides from class attributes (``auto_priority``, ``detect_priority``, ``supported_precisions``...)
without running anything, so a plugin that declares them wrongly (``auto_priority = "10"``, no ``name``) would
otherwise fail inside the validator with a bare ``TypeError`` or ``AttributeError``, for every ``Trainer()``, or
later (a precision without ``name`` at the first checkpoint save). The registry treats such a class as a broken
plugin instead: skipped with a warning by ``"auto"``, a ``ConfigError`` naming the entry point when asked for by name.

The rules are the documented types of the contracts' ``ClassVar`` declarations, the same ones the conformance kit's
``test_declares_capabilities_as_data`` checks. Nothing here imports torch or a contract module at import time.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["MISSING", "Mismatch", "declared_data_mismatches", "declared_data_problem", "loaded_problem"]

MISSING = object()  # the value of an attribute a plugin does not declare


class _Rule(NamedTuple):
    attribute: str
    valid: Callable[[Any], bool]
    expected: str


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _names(value: Any) -> bool:
    return value is None or (isinstance(value, (frozenset, set)) and all(isinstance(n, str) for n in value))


def _dtype(value: Any) -> bool:
    if value is None:
        return True
    import torch

    return isinstance(value, torch.dtype)


_NAME = _Rule("name", _text, "a non-empty str: the plugin's name, e.g. the one it is registered as")
_NAMES = "None (any) or a frozenset of names"
_RULES: dict[str, tuple[str, str, tuple[_Rule, ...]]] = {
    "xtrain.accelerators": ("xtrain.core.accelerator", "Accelerator", (
        _NAME,
        _Rule("device_type", _text, "a non-empty str, the torch device type such as 'cuda'"),
        _Rule("dist_backend", lambda v: v is None or _text(v), "None or a torch.distributed backend name such as "
                                                               "'gloo'"),
        _Rule("autocast_device_type", _text, "a non-empty str such as 'cpu'"),
        _Rule("supported_precisions", _names, _NAMES),
        _Rule("supported_strategies", _names, _NAMES),
        _Rule("auto_priority", _int, "an int (cpu is 0; the built-in GPUs 20-40)"),
        _Rule("default_strategy", _text, "a non-empty strategy name such as 'single_device'"),
        _Rule("default_parallel_strategy", _text, "a non-empty strategy name such as 'ddp'"),
        _Rule("interactive_parallel_strategy", lambda v: v is None or _text(v),
              "None or a strategy name that starts from a notebook, such as 'ddp_notebook'"),
        _Rule("device_index_limit", _flag, "True or False"),
        _Rule("supports_inference_mode", _flag, "True or False"),
    )),
    "xtrain.strategies": ("xtrain.core.strategy", "Strategy", (
        _NAME,
        _Rule("supported_accelerators", _names, _NAMES),
        _Rule("supported_precisions", _names, _NAMES),
        _Rule("needs_dist_backend", _flag, "True or False"),
        _Rule("max_devices", lambda v: v is None or (_int(v) and v >= 1), "None or an int >= 1"),
        _Rule("checkpoint_layout", lambda v: v in ("full", "sharded"), "'full' or 'sharded'"),
        _Rule("handles_gradient_accumulation", _flag, "True or False"),
        _Rule("resumes_exactly", _flag, "True or False"),
        _Rule("supports_inference_mode", _flag, "True or False"),
    )),
    "xtrain.precision": ("xtrain.core.precision", "Precision", (
        _NAME,
        _Rule("param_dtype", _dtype, "None or a torch.dtype"),
        _Rule("has_forward_context", _flag, "True or False"),
        _Rule("converts_input", _flag, "True or False"),
    )),
    "xtrain.checkpoint_io": ("xtrain.core.checkpoint_io", "CheckpointIO", (_NAME,)),
    "xtrain.environments": ("xtrain.core.environment", "ClusterEnvironment", (
        _NAME,
        _Rule("detect_priority", lambda v: v is None or _int(v), "None (chosen by name only) or an int ('local' is 0)"),
    )),
}


class Mismatch(NamedTuple):
    """A declared attribute whose value is not of its documented type (``value`` is :data:`MISSING` if absent)."""

    attribute: str
    expected: str
    value: Any


def declared_data_mismatches(group: str, plugin: object) -> list[Mismatch]:
    """Every attribute ``plugin`` (a class or an instance) declares wrongly for the contract of ``group``, in the
    contract's order; empty when ``plugin`` does not implement that contract (the registry reports that itself).

    The registry refuses a plugin for the first; the conformance kit (``xtrain.core.testing``) fails on the first.
    """
    rules = _RULES.get(group)
    if rules is None:
        return []
    module, contract_name, checks = rules
    contract = getattr(importlib.import_module(module), contract_name)
    cls = plugin if isinstance(plugin, type) else type(plugin)
    if not issubclass(cls, contract):
        return []
    found = ((rule, getattr(plugin, rule.attribute, MISSING)) for rule in checks)
    return [Mismatch(rule.attribute, rule.expected, value) for rule, value in found
            if value is MISSING or not rule.valid(value)]


def declared_data_problem(group: str, plugin: object) -> str | None:
    """What is wrong with the data that ``plugin`` (a class or an instance) declares for the contract of ``group``.

    Returns:
        ``None`` when every declared attribute has its documented type, or when ``plugin`` is not an implementation
        of the group's contract (a wrong type is reported by the registry's own check); otherwise a phrase that
        continues "the plugin (entry point ...) ...", naming the attribute, the value seen and what it must be.
    """
    mismatches = declared_data_mismatches(group, plugin)
    if not mismatches:
        return None
    attribute, expected, value = mismatches[0]
    contract_name = _RULES[group][1]
    cls = plugin if isinstance(plugin, type) else type(plugin)
    subject = f"names the class {cls.__qualname__}" if plugin is cls else f"returned a {cls.__qualname__}"
    if value is MISSING:
        return (f"{subject}, which does not declare {attribute}: the {contract_name} contract needs {expected} (set "
                f"{attribute} as a class attribute of {cls.__qualname__}).")
    return (f"{subject}, which declares {attribute} = {value!r} ({type(value).__name__}): the {contract_name} "
            f"contract needs {expected}.")


def loaded_problem(group: str, loaded: object) -> str | None:
    """What is wrong with what an entry point of ``group`` names (``None``: a usable class or factory)."""
    if not callable(loaded):
        return f"names {loaded!r}, which is not a class or a factory."
    if not isinstance(loaded, type):
        return None
    if inspect.isabstract(loaded):
        missing = ", ".join(sorted(getattr(loaded, "__abstractmethods__", ())))
        return (f"names the class {loaded.__name__}, which does not implement the abstract methods {missing} of its "
                f"contract.")
    return declared_data_problem(group, loaded)
