"""The one validator: Trainer/Engine hardware arguments in, a connected Strategy out.

Every choice is read from what the plugins declare (names, availability, supported accelerators and precisions,
launchers), and every invalid combination is a :class:`~xtrain.core.errors.ConfigError` raised here, before any
process starts.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

from xtrain.core._internal.interactive import is_interactive
from xtrain.core._internal.plugin_messages import class_given, name_of_other_kind
from xtrain.core.accelerator import Accelerator
from xtrain.core.checkpoint_io import CheckpointIO
from xtrain.core.environment import ClusterEnvironment
from xtrain.core.errors import ConfigError
from xtrain.core.precision import Precision
from xtrain.core.registry import ACCELERATORS, CHECKPOINT_IO, ENVIRONMENTS, PLUGIN_FAILURES, PRECISIONS, STRATEGIES
from xtrain.core.strategy import Strategy

__all__ = ["Resolved", "canonical_precision", "resolve"]

# Legacy spellings. The ambiguous ones ("16" could be true or mixed half precision) warn with the canonical name.
_LEGACY_PRECISION: dict[object, tuple[str, bool]] = {
    64: ("64-true", False), "64": ("64-true", False), 32: ("32-true", False), "32": ("32-true", False),
    16: ("16-mixed", True), "16": ("16-mixed", True), "bf16": ("bf16-mixed", True),
}
# Lightning's names for the DDP strategies with their default find_unused_parameters=False: the plain strategies.
_LEGACY_STRATEGY = {f"{name}_find_unused_parameters_false": name for name in ("ddp", "ddp_spawn", "ddp_fork",
                                                                              "ddp_notebook")}


class Resolved(NamedTuple):
    """The outcome of :func:`resolve`: a strategy connected to all its plugins."""

    strategy: Strategy
    num_devices: int
    num_nodes: int


def canonical_precision(precision: object) -> str:
    """Map legacy precision inputs (``16``, ``"bf16"``, ``32``) to canonical names, warning for ambiguous ones."""
    if precision is None:
        return "32-true"
    key = precision.lower().strip() if isinstance(precision, str) else precision
    if isinstance(key, bool):
        raise PRECISIONS.unknown(precision)
    if key in _LEGACY_PRECISION:
        name, ambiguous = _LEGACY_PRECISION[key]
        if ambiguous:
            warnings.warn(f"precision={precision!r} is a legacy spelling; it means precision={name!r}. "
                          f"Write {name!r} to say so explicitly.", UserWarning, stacklevel=4)
        return name
    if isinstance(key, str):
        return key
    raise PRECISIONS.unknown(precision)


def _split_plugins(plugins: object) -> tuple[Precision | None, CheckpointIO | None, ClusterEnvironment | None]:
    items: Sequence[Any] = [] if plugins is None else plugins if isinstance(plugins, (list, tuple)) else [plugins]
    found: dict[type, Any] = {}
    for item in items:
        plugin = item
        if isinstance(item, str):
            for registry, base in ((PRECISIONS, Precision), (CHECKPOINT_IO, CheckpointIO),
                                   (ENVIRONMENTS, ClusterEnvironment)):
                if item in registry:
                    plugin = registry.create(item, base=base)
                    break
            else:
                raise name_of_other_kind("plugins", item) or ConfigError(
                                  "plugins", item, "is not a registered precision, checkpoint_io or environment name.",
                                  choices=[*PRECISIONS.names(), *CHECKPOINT_IO.names(), *ENVIRONMENTS.names()],
                                  fix="pass a registered name or a plugin instance.")
        kind = next((k for k in (Precision, CheckpointIO, ClusterEnvironment) if isinstance(plugin, k)), None)
        if kind is None:
            raise class_given("plugins", item) or ConfigError("plugins", item, "is not a plugin.",
                              choices=["a Precision", "a CheckpointIO", "a ClusterEnvironment", "a registered name"],
                              fix="pass plugin instances; strategies go to strategy= and accelerators to accelerator=.")
        if kind in found:
            raise ConfigError("plugins", plugins, f"holds more than one {kind.__name__} ({found[kind]!r} and {plugin!r}).",
                              fix=f"pass at most one {kind.__name__}.")
        found[kind] = plugin
    return found.get(Precision), found.get(CheckpointIO), found.get(ClusterEnvironment)


def _auto_accelerator(strategy: Strategy | None) -> Accelerator:
    candidates: dict[type[Accelerator], str] = {}
    for name, cls in ACCELERATORS.classes(Accelerator):
        candidates.setdefault(cls, name)
    usable = [c for c, name in candidates.items() if _is_available(name, c) and
              (strategy is None or strategy.supported_accelerators is None or c.name in strategy.supported_accelerators)]
    for best in sorted(usable, key=lambda c: (c.auto_priority, c.name), reverse=True):
        try:
            return best()
        except PLUGIN_FAILURES as err:  # one broken plugin must not break the automatic choice
            ACCELERATORS.skip(candidates[best], err)
    raise ConfigError("accelerator", "auto", "found no available accelerator.", choices=ACCELERATORS.names(),
                      fix="pip install xtrain-core (it provides 'cpu').")


def _is_available(name: str, cls: type[Accelerator]) -> bool:
    """``cls.is_available()``, and its devices countable; a plugin whose check or count raises counts as unavailable,
    with one warning (a driver that loads but cannot count its devices must not take ``"auto"`` down with it)."""
    try:
        return bool(cls.is_available()) and cls.device_count() >= 0
    except PLUGIN_FAILURES as err:  # a broken plugin is skipped, not fatal
        ACCELERATORS.skip(name, err)
        return False


def _available_names() -> list[str]:
    return [name for name, cls in ACCELERATORS.classes(Accelerator) if _is_available(name, cls)]


def _unavailable(accelerator: object, acc: Accelerator) -> ConfigError:
    available = _available_names()
    example = f"e.g. accelerator={available[0]!r}, " if available else ""
    try:
        reason = acc.unavailable_reason()
    except PLUGIN_FAILURES as err:  # the reason is a courtesy; its failure must not hide the real error
        reason = f"(its unavailable_reason() raised {type(err).__name__}: {err})"
    because = f" {reason.rstrip('.')}." if reason else ""
    fix = f"choose an available accelerator, {example}or 'auto'."
    return ConfigError("accelerator", accelerator, f"{acc.name!r} is not available on this machine.{because}",
                       choices=available, fix=f"{fix[:-1]}; or make it available as said." if reason else fix)


def _accelerator(accelerator: object, strategy: Strategy | None) -> Accelerator:
    if strategy is not None and strategy._accelerator is not None:
        if accelerator not in ("auto", None):
            raise ConfigError("accelerator", accelerator, f"is set here and also inside strategy={strategy!r}.",
                              fix="set the accelerator in one place only.")
        return strategy._accelerator
    if isinstance(accelerator, Accelerator):
        acc = accelerator
    elif accelerator is None or (isinstance(accelerator, str) and accelerator.strip().lower() == "auto"):
        return _auto_accelerator(strategy)
    elif isinstance(accelerator, str):
        if accelerator not in ACCELERATORS and (other := name_of_other_kind("accelerator", accelerator)):
            raise other
        acc = ACCELERATORS.create(accelerator, base=Accelerator)
    else:
        raise class_given("accelerator", accelerator) or ConfigError("accelerator", accelerator, "must be a registered name, 'auto' or an Accelerator instance.",
                          choices=["auto", *ACCELERATORS.names()], fix="write accelerator='auto'.")
    try:
        available = acc.is_available()
    except PLUGIN_FAILURES as err:
        if not isinstance(accelerator, str):
            raise
        raise ACCELERATORS.broken(accelerator, f"raised {type(err).__name__}: {err} in is_available().") from err
    if not available:
        raise _unavailable(accelerator, acc)
    return acc


def _device_indices(acc: Accelerator, accelerator: object, devices: object) -> list[int]:
    """``acc.parse_devices(devices)``; an accelerator chosen by name whose device count raises is a broken plugin."""
    try:
        return acc.parse_devices(devices)  # type: ignore[arg-type]
    except ConfigError:
        raise
    except PLUGIN_FAILURES as err:
        if not isinstance(accelerator, str) or accelerator.strip().lower() == "auto" or accelerator not in ACCELERATORS:
            raise
        raise ACCELERATORS.broken(accelerator, f"raised {type(err).__name__}: {err} counting its devices "
                                  f"(device_count() or parse_devices()).") from err


def _launched(devices: object, env: ClusterEnvironment) -> object:
    """``devices="auto"`` under a launcher that started the processes (torchrun, mpirun, horovodrun): as many as
    it started on this node, as a user who wrote no count expects (an accelerator's own "auto" is 1 on the CPU).
    SLURM does not say (a batch script runs one process under a job of many tasks): write ``devices`` there."""
    if not (isinstance(devices, str) and devices.strip().lower() == "auto" and env.creates_processes_externally):
        return devices
    started = env.processes_per_node()
    return devices if started is None else started


def _strategy(strategy: object) -> Strategy | None:
    if isinstance(strategy, Strategy):
        return strategy
    if isinstance(strategy, str):
        if strategy.strip().lower() == "auto":
            return None
        name = _LEGACY_STRATEGY.get(strategy, strategy)
        if name not in STRATEGIES and (other := name_of_other_kind("strategy", name)):
            raise other
        created: Strategy = STRATEGIES.create(name, base=Strategy)
        return created
    raise class_given("strategy", strategy) or ConfigError("strategy", strategy, "must be a registered name, 'auto' or a Strategy instance.",
                      choices=["auto", *STRATEGIES.names()], fix="write strategy='auto'.")


def _environment(explicit: ClusterEnvironment | None, strategy: Strategy | None) -> ClusterEnvironment:
    if explicit is not None:
        if strategy is not None and strategy._cluster_environment is not None:
            raise ConfigError("plugins", explicit, f"sets a cluster environment that strategy={strategy!r} sets too.",
                              fix="set the environment in one place only.")
        return explicit
    if strategy is not None and strategy._cluster_environment is not None:
        return strategy._cluster_environment
    detected = []
    for name, cls in ENVIRONMENTS.classes(ClusterEnvironment):
        try:
            if cls.detect_priority is not None and cls.detect():
                detected.append((cls.detect_priority, name))
        except PLUGIN_FAILURES as err:  # a broken plugin is skipped, not fatal
            ENVIRONMENTS.skip(name, err)
    for _, name in sorted(detected, reverse=True):
        try:
            created: ClusterEnvironment = ENVIRONMENTS.create(name, base=ClusterEnvironment)
        except ConfigError as err:
            ENVIRONMENTS.skip(name, err)
            continue
        return created
    raise ConfigError("plugins", None, "no cluster environment detected, not even 'local'.",
                      fix="pip install --force-reinstall xtrain-core")


def _precision(precision: object, plugin: Precision | None, strategy: Strategy | None) -> Precision:
    if plugin is not None and precision is not None:
        raise ConfigError("precision", precision, f"is set here and also as plugins=[{plugin!r}].",
                          fix="pass the precision in one place only.")
    if strategy is not None and strategy._precision is not None:
        if precision is not None or plugin is not None:
            raise ConfigError("precision", precision or plugin, f"is set here and also inside strategy={strategy!r}.",
                              fix="set the precision in one place only.")
        return strategy._precision
    if plugin is not None:
        return plugin
    if isinstance(precision, Precision):
        return precision
    if wrong := class_given("precision", precision):
        raise wrong
    name = canonical_precision(precision)
    if name not in PRECISIONS and (other := name_of_other_kind("precision", name)):
        raise other
    created: Precision = PRECISIONS.create(name, base=Precision)
    return created


def _check_capabilities(acc: Accelerator, strategy: Strategy, precision: Precision, num_devices: int) -> None:
    if strategy.supported_accelerators is not None and acc.name not in strategy.supported_accelerators:
        raise ConfigError("accelerator", acc.name, f"cannot run strategy={strategy.name!r}.",
                          choices=sorted(strategy.supported_accelerators),
                          fix=f"choose one of those accelerators, or another strategy for {acc.name!r}.")
    if acc.supported_strategies is not None and strategy.name not in acc.supported_strategies:
        raise ConfigError("strategy", strategy.name, f"cannot run on accelerator={acc.name!r}.",
                          choices=sorted(acc.supported_strategies), fix="choose one of those strategies.")
    if strategy.needs_dist_backend and acc.dist_backend is None:
        raise ConfigError("strategy", strategy.name, f"needs collectives, and accelerator={acc.name!r} declares no "
                          f"torch.distributed backend.", fix="choose a single-device strategy for this accelerator.")
    if strategy.max_devices is not None and num_devices > strategy.max_devices:
        raise ConfigError("devices", num_devices, f"is more than strategy={strategy.name!r} drives "
                          f"({strategy.max_devices} per node).",
                          fix=f"write devices={strategy.max_devices}, or strategy='ddp' for several devices.")
    allowed = [s for s in (acc.supported_precisions, strategy.supported_precisions) if s is not None]
    if any(precision.name not in s for s in allowed):
        working = set(PRECISIONS.names())
        for s in allowed:
            working &= s
        who = (f"accelerator={acc.name!r}" if acc.supported_precisions is not None
               and precision.name not in acc.supported_precisions else f"strategy={strategy.name!r}")
        raise ConfigError("precision", precision.name, f"is not supported by {who}.", choices=sorted(working),
                          fix="choose one of the precisions listed.")


def resolve(*, accelerator: object = "auto", devices: object = "auto", num_nodes: object = 1,
            strategy: object = "auto", precision: object = None, plugins: object = None) -> Resolved:
    """Resolve the hardware arguments of ``Trainer``/``Engine`` into a connected strategy.

    Raises:
        ConfigError: For any invalid value or combination, before anything starts.
    """
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise ConfigError("num_nodes", num_nodes, "must be a positive int.", fix="write num_nodes=1 for one machine.")
    precision_plugin, io_plugin, env_plugin = _split_plugins(plugins)
    strat = _strategy(strategy)
    acc = _accelerator(accelerator, strat)
    env = _environment(env_plugin, strat)
    indices = _device_indices(acc, accelerator, _launched(devices, env))
    device_list = [acc.get_device(i) for i in indices]
    picked = strat is None
    if strat is None:
        world = len(indices) * num_nodes
        name = acc.default_strategy if world == 1 else acc.default_parallel_strategy
        if world > 1 and num_nodes == 1 and acc.interactive_parallel_strategy and is_interactive():
            name = acc.interactive_parallel_strategy  # as Lightning: a notebook's processes are forked
        if name not in STRATEGIES:
            err = STRATEGIES.unknown(name)
            raise ConfigError("devices", devices, f"with num_nodes={num_nodes} asks for {world} processes, which needs "
                              f"the {name!r} strategy, and no installed package provides it.",
                              choices=err.choices, fix=err.fix)
        strat = _strategy(name)
        assert strat is not None
    prec = _precision(precision, precision_plugin, strat)
    if io_plugin is not None and strat._checkpoint_io is not None:
        raise ConfigError("plugins", io_plugin, f"sets a CheckpointIO that strategy={strat!r} sets too.",
                          fix="set the checkpoint IO in one place only.")
    io = io_plugin or strat._checkpoint_io or CHECKPOINT_IO.create("torch", base=CheckpointIO)
    _check_capabilities(acc, strat, prec, len(indices))
    prec.connect(device_type=acc.autocast_device_type)
    strat.connect(accelerator=acc, precision=prec, checkpoint_io=io, cluster_environment=env,
                  devices=device_list, num_nodes=num_nodes)
    env.validate_settings(num_devices=strat.processes_per_node, num_nodes=num_nodes)
    strat.check_config()
    launcher = strat.launcher
    if launcher is not None:
        if is_interactive() and not launcher.interactive_compatible:
            picked_by = "(what strategy='auto' picked) " if picked else ""
            raise ConfigError("strategy", strat.name, f"{picked_by}starts its processes by running or importing your "
                              "script anew, which an interactive session (notebook, REPL) does not have: the code "
                              "you defined there would be missing.",
                              fix="use strategy='ddp_notebook' (fork) here, or run your code as a script.")
        launcher.check()
    return Resolved(strategy=strat, num_devices=len(indices), num_nodes=num_nodes)
