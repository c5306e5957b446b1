"""The one declared table of every accelerator x strategy x precision cell of the installed packages.

Cells come from the registry (every canonical accelerator, every strategy, every precision name) and their expected
outcome from what the plugins declare (``supported_accelerators``, ``supported_strategies``, ``needs_dist_backend``,
``dist_backend``, ``supported_precisions``), not from a hand-written list that could drift:

* **refused**: the validator must raise the ConfigError for :attr:`Cell.argument`, with :attr:`Cell.refusal` in it;
* **runs**: where the hardware and libraries are here it is trained for real (a few steps with decreasing loss,
  saved, resumed, and the resumed run ends exactly where the uninterrupted one did); elsewhere it is skipped with
  :attr:`Cell.unavailable` as the reason, never passed silently.

``python tests_integration/matrix.py`` prints the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

from xtrain.core import Accelerator, ConfigError, ParallelStrategy, Strategy
from xtrain.core.registry import ACCELERATORS, PRECISIONS, STRATEGIES

__all__ = ["Cell", "accelerators", "cells", "groups"]


@dataclass(frozen=True)
class Cell:
    accelerator: str
    strategy: str
    precision: str
    devices: int
    outcome: Literal["runs", "refused"]
    argument: str = ""
    refusal: str = ""
    unavailable: str = ""

    @property
    def id(self) -> str:
        return f"{self.accelerator}-{self.strategy}-{self.precision}"

    @property
    def group(self) -> str:
        return f"{self.accelerator}-{self.strategy}"


@cache
def accelerators() -> tuple[type[Accelerator], ...]:
    """Every registered accelerator class under its own name (aliases such as ``gpu`` and ``tpu`` left out)."""
    found = []
    for name in ACCELERATORS.names():
        loaded = ACCELERATORS.load(name)
        if isinstance(loaded, type) and issubclass(loaded, Accelerator) and loaded.name == name:
            found.append(loaded)
    return tuple(found)


def _devices(strategy: Strategy) -> int:
    """Two processes for strategies that run one process per device, so collectives are really exercised."""
    per_device = isinstance(strategy, ParallelStrategy) and (
        type(strategy).processes_per_node is ParallelStrategy.processes_per_node)
    return 2 if per_device else 1


def _refusal(acc: type[Accelerator], strategy: Strategy, precision: str) -> tuple[str, str]:
    """What the declared capabilities say about a cell: ("", "") when it runs, else (argument, refusal text)."""
    if strategy.supported_accelerators is not None and acc.name not in strategy.supported_accelerators:
        return "accelerator", f"cannot run strategy={strategy.name!r}"
    if acc.supported_strategies is not None and strategy.name not in acc.supported_strategies:
        return "strategy", f"cannot run on accelerator={acc.name!r}"
    if strategy.needs_dist_backend and acc.dist_backend is None:
        return "strategy", "declares no torch.distributed backend"
    if acc.supported_precisions is not None and precision not in acc.supported_precisions:
        return "precision", f"is not supported by accelerator={acc.name!r}"
    if strategy.supported_precisions is not None and precision not in strategy.supported_precisions:
        return "precision", f"is not supported by strategy={strategy.name!r}"
    return "", ""


@cache
def _unavailable(acc: type[Accelerator], strategy: str, devices: int) -> str:
    """Why a cell the declarations allow cannot run here: missing hardware, or a library the strategy needs (which
    the validator reports as not installed). Any other refusal is left for the test to expose as a contradiction."""
    if not acc.is_available():
        return f"accelerator {acc.name!r} is not available on this machine"
    from xtrain.core._internal.resolve import resolve

    try:
        resolve(accelerator=acc.name, strategy=strategy, devices=devices)
    except ConfigError as err:
        if "not installed" in str(err):
            return str(err)
    return ""


@cache
def cells() -> tuple[Cell, ...]:
    out = []
    for acc in accelerators():
        for strategy_name in STRATEGIES.names():
            try:
                strategy = STRATEGIES.create(strategy_name)
            except ConfigError as err:  # a strategy whose library is missing cannot even be described here
                out += [Cell(acc.name, strategy_name, p, 1, "runs", unavailable=str(err)) for p in PRECISIONS.names()]
                continue
            for precision in PRECISIONS.names():
                argument, refusal = _refusal(acc, strategy, precision)
                devices = _devices(strategy)
                if argument:
                    out.append(Cell(acc.name, strategy_name, precision, devices, "refused", argument, refusal))
                else:
                    out.append(Cell(acc.name, strategy_name, precision, devices, "runs",
                                    unavailable=_unavailable(acc, strategy_name, devices)))
    return tuple(out)


def groups() -> dict[str, list[Cell]]:
    """Runnable cells by accelerator and strategy (one real launch runs all precisions of a group)."""
    by: dict[str, list[Cell]] = {}
    for cell in cells():
        if cell.outcome == "runs":
            by.setdefault(cell.group, []).append(cell)
    return by


if __name__ == "__main__":
    for cell in cells():
        status = f"refused ({cell.argument}: {cell.refusal})" if cell.outcome == "refused" else (
            f"runs; not here: {cell.unavailable}" if cell.unavailable else "runs")
        print(f"{cell.id:55} devices={cell.devices}  {status}")
