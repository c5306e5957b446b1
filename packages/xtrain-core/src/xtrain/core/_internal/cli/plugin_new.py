"""``xtrain plugin new {accelerator,strategy,precision} NAME``: an installable plugin package that passes the kit.

The package depends on xtrain-core only, registers NAME through its ``pyproject.toml`` entry points, and carries
a conformance-kit test, so ``pip install -e './xtrain-NAME[test]' && pytest xtrain-NAME`` passes before the author
changes a line. The generated code runs on the CPU and marks with ``TODO`` where the real device or numerics go.
"""

from __future__ import annotations

import re
from pathlib import Path
from string import Template
from typing import Any

from xtrain.core.__about__ import __version__
from xtrain.core.errors import ConfigError

__all__ = ["KINDS", "add_plugin_actions", "new_plugin", "plugin_parser", "run_plugin"]

KINDS = ("accelerator", "strategy", "precision")
_GROUPS = {"accelerator": "xtrain.accelerators", "strategy": "xtrain.strategies", "precision": "xtrain.precision"}
_NAME = re.compile(r"^[a-z][a-z0-9_-]*[a-z0-9]$")

_PYPROJECT = '''[build-system]
requires = ["hatchling>=1.25"]
build-backend = "hatchling.build"

[project]
name = "$dist"
version = "0.1.0"
description = "The '$name' $kind for xtrain."
requires-python = ">=3.11"
dependencies = ["xtrain-core>=$floor,<$ceiling"]

[project.optional-dependencies]
test = ["xtrain-core[test]>=$floor,<$ceiling"]

# This line is what makes Trainer($kind="$name") find the plugin.
[project.entry-points."$group"]
"$name" = "$package.$kind:$cls"

[tool.hatch.build.targets.wheel]
packages = ["src/$package"]
'''

_ACCELERATOR = '''"""The '$name' accelerator."""

from __future__ import annotations

import os
from typing import ClassVar

import torch
from typing_extensions import override

from xtrain.core.accelerator import Accelerator


class $cls(Accelerator):
    """'$name' devices (TODO: this template runs them on the CPU until your device library is wired in)."""

    name: ClassVar[str] = "$name"
    device_type: ClassVar[str] = "cpu"  # TODO: the torch device type of your devices
    dist_backend: ClassVar[str | None] = "gloo"  # TODO: your torch.distributed backend, or None
    autocast_device_type: ClassVar[str] = "cpu"
    supported_precisions: ClassVar[frozenset[str] | None] = frozenset({"32-true", "64-true"})
    auto_priority: ClassVar[int] = -10  # TODO: above 0 (the CPU) once it runs on real hardware
    count_variable: ClassVar[str] = "$env"

    @classmethod
    @override
    def is_available(cls) -> bool:
        return cls.device_count() > 0

    @classmethod
    @override
    def device_count(cls) -> int:
        value = os.environ.get(cls.count_variable, "1")  # TODO: ask your device library
        return int(value) if value.isdigit() else 0

    @classmethod
    @override
    def unavailable_reason(cls) -> str | None:
        if cls.is_available():
            return None
        return f"{cls.count_variable}={os.environ.get(cls.count_variable)!r}; set it to the number of devices"

    @override
    def get_device(self, index: int) -> torch.device:
        return torch.device(self.device_type)  # TODO: torch.device(self.device_type, index)

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        return {}  # TODO: memory used and free, utilisation
'''

_STRATEGY = '''"""The '$name' strategy."""

from __future__ import annotations

from typing import Any, ClassVar

from typing_extensions import override

from xtrain.core.defaults import SingleDeviceStrategy
from xtrain.core.strategy import StepName


class $cls(SingleDeviceStrategy):
    """One process on one device (TODO: for several processes, see the guide "Write your own strategy")."""

    name: ClassVar[str] = "$name"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.training_steps = 0

    @override
    def run_step(self, name: StepName, *args: Any, **kwargs: Any) -> Any:
        if name == "training_step":
            self.training_steps += 1
        return super().run_step(name, *args, **kwargs)
'''

_PRECISION = '''"""The '$name' precision."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar

import torch
from torch import nn
from typing_extensions import override

from xtrain.core.precision import Precision


class $cls(Precision):
    """'$name' (TODO: this template computes in float32; convert the module and open your context here)."""

    name: ClassVar[str] = "$name"
    param_dtype: ClassVar[torch.dtype | None] = None  # TODO: the dtype convert_module gives parameters
    has_forward_context: ClassVar[bool] = False  # TODO: True once forward_context does something
    converts_input: ClassVar[bool] = False

    @override
    def convert_module(self, module: nn.Module) -> nn.Module:
        return module

    @override
    def forward_context(self) -> AbstractContextManager[Any]:
        return nullcontext()
'''

_TESTS = {
    "accelerator": '''from xtrain.core.testing import AcceleratorConformance

from $package.accelerator import $cls


class Test$cls(AcceleratorConformance):
    accelerator = $cls
''',
    "strategy": '''from xtrain.core.testing import StrategyConformance


class Test$cls(StrategyConformance):
    strategy = "$name"
    devices = 1
''',
    "precision": '''import torch

from xtrain.core.testing import PrecisionConformance


class Test$cls(PrecisionConformance):
    precision = "$name"
    expected_param_dtype = torch.float32
    expected_activation_dtype = torch.float32
''',
}
_SOURCES = {"accelerator": _ACCELERATOR, "strategy": _STRATEGY, "precision": _PRECISION}


def new_plugin(kind: str, name: str, directory: Path) -> Path:
    """Write the package for plugin ``name`` of ``kind`` under ``directory``; returns the package's root."""
    from xtrain.core.registry import ACCELERATORS, PRECISIONS, STRATEGIES

    if kind not in KINDS:
        raise ConfigError("kind", kind, "is not a plugin kind this command writes.", choices=KINDS,
                          fix="write one of them.")
    if not _NAME.match(name):
        raise ConfigError("name", name, "must be lower case letters, digits, '-' or '_', starting with a letter.",
                          fix="write e.g. 'acme_npu'.")
    registry = {"accelerator": ACCELERATORS, "strategy": STRATEGIES, "precision": PRECISIONS}[kind]
    if name in registry:
        raise ConfigError("name", name, f"is already registered (a {kind}) by {registry.distribution_of(name)}; "
                          "a second registration would make the name unusable.", fix="choose a name nobody uses.")
    dist = f"xtrain-{name.replace('_', '-')}"
    root = directory / dist
    if root.exists():
        raise ConfigError("directory", str(root), "exists already.", fix="remove it or pass another --directory.")
    major = int(__version__.split(".")[0])
    words = "".join(part.capitalize() for part in re.split(r"[-_]", name))
    values = {"name": name, "kind": kind, "dist": dist, "package": f"xtrain_{name.replace('-', '_')}",
              "group": _GROUPS[kind], "cls": f"{words}{kind.capitalize()}", "floor": __version__,
              "ceiling": str(major + 1), "env": f"{name.upper().replace('-', '_')}_DEVICE_COUNT"}
    files = {
        "pyproject.toml": _PYPROJECT,
        "README.md": f"# {dist}\n\nThe `{name!r}` {kind} for xtrain: `pip install .`, then use it by name.\n"
                     f"Test it with `pip install -e '.[test]' && pytest`.\n",
        f"src/{values['package']}/__init__.py": f'"""The {name!r} {kind} for xtrain."""\n',
        f"src/{values['package']}/{kind}.py": _SOURCES[kind],
        f"tests/test_{values['package']}_conformance.py": _TESTS[kind],
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(text).substitute(values))
    return root


def plugin_parser() -> Any:
    from jsonargparse import ArgumentParser

    return ArgumentParser(description="Start a plugin package of your own.")


def add_plugin_actions(parser: Any) -> None:
    from jsonargparse import ArgumentParser

    commands = parser.add_subcommands(dest="action")
    new = ArgumentParser(description="Write an installable package with the plugin, its entry point and a "
                         "conformance-kit test that passes as generated.")
    new.add_argument("kind", type=str, help=f"One of {', '.join(KINDS)}.")
    new.add_argument("name", type=str, help="The name users will pass, e.g. 'acme_npu'.")
    new.add_argument("--directory", type=str, default=".", help="Where to create xtrain-NAME/.")
    commands.add_subcommand("new", new, help="scaffold a plugin package")
    listing = ArgumentParser(description="List every installed plugin by kind and the package it comes from, "
                             "importing nothing; --check imports each and says which fail to load, and why.")
    listing.add_argument("--check", action="store_true", help="Import every plugin and report the broken ones.")
    commands.add_subcommand("list", listing, help="list the installed plugins (--check: and whether they load)")


def run_plugin(cfg: Any) -> int:
    if cfg.action == "list":
        from xtrain.core._internal.cli.plugin_list import plugin_report

        lines, broken = plugin_report(check=cfg.list.check)
        print("\n".join(lines))
        if cfg.list.check:
            print(f"{broken} plugin(s) failed to load" if broken else "every plugin loads")
        return 1 if broken else 0
    if cfg.action != "new":
        return 2
    root = new_plugin(cfg.new.kind, cfg.new.name, Path(cfg.new.directory))
    print(f"created {root}\nnext: pip install -e '{root}[test]' && pytest {root}")
    return 0
