"""What an installed plugin's misbehaviour tells the user: a slow import names itself and the way around it, a
plugin of the wrong type is refused before it runs, each group's fix names the argument that chooses it, and the
scaffolded accelerator starts as one device.

Each plugin is a real installed distribution (a dist-info with entry points on ``sys.path``).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xtrain.core import ConfigError, Trainer
from xtrain.core import registry as registry_module
from xtrain.core._internal.cli.plugin_new import new_plugin
from xtrain.core._internal.resolve import resolve
from xtrain.core.registry import PluginWarning

Install = Callable[..., Any]

SLOW_ENVIRONMENT = '''
import time
time.sleep(0.3)
from xtrain.core.defaults import LocalEnvironment

class SlowEnvironment(LocalEnvironment):
    """Never detected; only slow to import."""
    name = "slow"
    detect_priority = None
'''
SLOW_ACCELERATOR = '''
import time
time.sleep(0.3)
from xtrain.core.defaults.cpu import CPUAccelerator

class SlowNPU(CPUAccelerator):
    """Unavailable; only slow to import."""
    name = "slow_npu"

    @classmethod
    def is_available(cls):
        return False
'''
WRONG_TYPE = '''
CREATED = []

class NotAPlugin:
    """Registered in a plugin group, but no plugin: creating it has a side effect."""
    def __init__(self):
        CREATED.append(self)

def factory():
    CREATED.append("factory")
    return object()
'''


def plugin_warnings(**kwargs: Any) -> list[str]:
    """The PluginWarnings that ``resolve(**kwargs)`` gives."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resolve(**kwargs)
    return [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]


@pytest.fixture
def fast_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugins below sleep 0.3 s at import; a 0.1 s threshold calls that slow without slowing the suite."""
    monkeypatch.setattr(registry_module, "SLOW_IMPORT_SECONDS", 0.1)


@pytest.mark.usefixtures("fast_threshold")
def test_a_slow_environment_plugin_is_named_once_with_its_seconds_and_fix(installed_distribution: Install) -> None:
    installed_distribution("acme-slow", {"xtrain.environments": {"slow": "slow_env:SlowEnvironment"}},
                           {"slow_env": SLOW_ENVIRONMENT})
    messages = plugin_warnings(accelerator="cpu")
    assert len(messages) == 1, messages
    message = messages[0]
    for fact in ("entry point 'slow = slow_env:SlowEnvironment' of acme-slow 1.0.0", "report this to the maintainers "
                 "of acme-slow", "uninstall acme-slow", "plugins=['local']"):
        assert fact in message, (fact, message)
    seconds = re.search(r"took (\d+\.\d+) s", message)
    assert seconds is not None and float(seconds.group(1)) >= 0.3, message
    assert "plugins='auto'" not in message and "accelerator=" not in message, message
    assert plugin_warnings(accelerator="cpu") == [], "once per process, not at every Trainer()"


def test_pinning_the_environment_imports_no_other_environment_plugin(installed_distribution: Install) -> None:
    """The slow-import warning's advice holds: an explicit environment skips the detection and its imports."""
    installed_distribution("acme-slow", {"xtrain.environments": {"slow": "slow_env:SlowEnvironment"}},
                           {"slow_env": SLOW_ENVIRONMENT})
    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginWarning)
        Trainer(accelerator="cpu", plugins=["local"], logger=False, enable_checkpointing=False)
    assert "slow_env" not in sys.modules


@pytest.mark.usefixtures("fast_threshold")
def test_a_slow_accelerator_names_the_accelerator_argument_and_is_not_loaded_when_pinned(
        installed_distribution: Install) -> None:
    installed_distribution("acme-slow", {"xtrain.accelerators": {"slow_npu": "slow_acc:SlowNPU"}},
                           {"slow_acc": SLOW_ACCELERATOR})
    assert plugin_warnings(accelerator="cpu", plugins=["local"]) == []
    assert "slow_acc" not in sys.modules, "an explicit accelerator loads no other accelerator plugin"
    messages = plugin_warnings(plugins=["local"])
    assert len(messages) == 1 and "acme-slow" in messages[0] and "accelerator='cpu'" in messages[0], messages


@pytest.mark.usefixtures("fast_threshold")
def test_a_slow_plugin_asked_for_by_name_is_reported_without_advice_to_uninstall_it(
        installed_distribution: Install) -> None:
    installed_distribution("acme-slow", {"xtrain.environments": {"slow": "slow_env:SlowEnvironment"}},
                           {"slow_env": SLOW_ENVIRONMENT})
    messages = plugin_warnings(accelerator="cpu", plugins=["slow"])
    assert len(messages) == 1 and messages[0].startswith("plugins='slow': the plugin (entry point 'slow = "), messages
    assert "report this to the maintainers of acme-slow" in messages[0] and "uninstall" not in messages[0]


def test_fast_plugins_give_no_slow_import_warning(installed_distribution: Install) -> None:
    installed_distribution("acme-fast", {"xtrain.environments": {"slow": "slow_env:SlowEnvironment"}},
                           {"slow_env": SLOW_ENVIRONMENT.replace("time.sleep(0.3)", "")})
    assert plugin_warnings(accelerator="cpu") == []


@pytest.mark.parametrize(("argument", "group", "value", "base"), [
    ("accelerator", "xtrain.accelerators", "npu", "an Accelerator"),
    ("strategy", "xtrain.strategies", "npu", "a Strategy"),
    ("precision", "xtrain.precision", "npu-true", "a Precision"),
    ("plugins", "xtrain.environments", "npu", "a ClusterEnvironment"),
])
def test_a_class_of_the_wrong_type_is_refused_before_it_is_created(installed_distribution: Install, argument: str,
                                                                   group: str, value: str, base: str) -> None:
    installed_distribution("acme-npu", {group: {value: "npu_mod:NotAPlugin"}}, {"npu_mod": WRONG_TYPE})
    with pytest.raises(ConfigError) as info:
        resolve(**{"accelerator": "cpu", argument: value})
    message = str(info.value)
    assert message.startswith(f"{argument}={value!r}: the plugin (entry point '{value} = npu_mod:NotAPlugin' of "
                              f"acme-npu 1.0.0) names the class NotAPlugin, which is not {base}."), message
    assert "report this to the maintainers of acme-npu" in message
    assert sys.modules["npu_mod"].CREATED == [], "its constructor must not run"


def test_a_factory_returning_the_wrong_type_is_refused_in_the_same_style(installed_distribution: Install) -> None:
    installed_distribution("acme-npu", {"xtrain.accelerators": {"npu": "npu_mod:factory"}}, {"npu_mod": WRONG_TYPE})
    with pytest.raises(ConfigError) as info:
        resolve(accelerator="npu")
    message = str(info.value)
    assert message.startswith("accelerator='npu': the plugin (entry point 'npu = npu_mod:factory' of acme-npu 1.0.0) "
                              "returned <object object"), message
    assert "which is not an Accelerator" in message and "report this to the maintainers of acme-npu" in message


def test_auto_skips_a_class_of_the_wrong_type_with_one_warning_without_creating_it(
        installed_distribution: Install) -> None:
    installed_distribution("acme-npu", {"xtrain.accelerators": {"npu": "npu_mod:NotAPlugin"},
                                        "xtrain.environments": {"npu": "npu_mod:NotAPlugin"}}, {"npu_mod": WRONG_TYPE})
    messages = plugin_warnings()
    assert len(messages) == 2, messages
    accelerator, environment = sorted(messages)
    assert accelerator.startswith("accelerator='auto' skipped 'npu': ") and "which is not an Accelerator" in accelerator
    assert "which is not a ClusterEnvironment" in environment and "acme-npu 1.0.0" in environment
    assert sys.modules["npu_mod"].CREATED == []
    assert plugin_warnings() == []


def test_a_broken_environment_plugin_names_the_argument_that_chooses_environments(
        installed_distribution: Install) -> None:
    installed_distribution("acme-cluster", {"xtrain.environments": {"acme": "no_such_cluster_module:Acme"}})
    messages = plugin_warnings(accelerator="cpu")
    assert len(messages) == 1, messages
    message = messages[0]
    assert "plugins='auto'" not in message, "plugins='auto' is no valid value: environments are detected"
    assert message.startswith("the cluster environment detection skipped 'acme': "), message
    assert "ModuleNotFoundError" in message and "report this to the maintainers of acme-cluster" in message
    assert message.endswith(" Or pass plugins=['local'] (or the environment your cluster uses): an explicit choice "
                            "does not look through the installed plugins."), message


def test_a_broken_accelerator_plugin_names_the_accelerator_argument(installed_distribution: Install) -> None:
    installed_distribution("acme-npu", {"xtrain.accelerators": {"npu": "no_such_npu_module:NPU"}})
    messages = plugin_warnings(plugins=["local"])
    assert len(messages) == 1 and messages[0].startswith("accelerator='auto' skipped 'npu': "), messages
    assert "pass accelerator='cpu' (or the accelerator you use)" in messages[0]


def test_the_scaffolded_accelerator_is_one_device_by_default(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    root = new_plugin("accelerator", "acme_one", tmp_path)
    spec = importlib.util.spec_from_file_location("scaffolded_acme_one",
                                                  root / "src" / "xtrain_acme_one" / "accelerator.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    accelerator = module.AcmeOneAccelerator
    monkeypatch.delenv("ACME_ONE_DEVICE_COUNT", raising=False)
    assert accelerator.device_count() == 1
    resolved = resolve(accelerator=accelerator(), plugins=["local"])
    assert resolved.num_devices == 1 and resolved.strategy.name == "single_device"
    monkeypatch.setenv("ACME_ONE_DEVICE_COUNT", "3")
    assert accelerator.device_count() == 3


def test_torchs_first_import_is_not_counted_against_a_plugin() -> None:
    """``import xtrain.core`` does not import torch; the first plugin loaded did, and its ~1 s was reported as the
    plugin's slow import (xtrain's own ``cpu`` plugin, in the docs build's catalogue)."""
    code = ("import sys, warnings; warnings.simplefilter('error'); import xtrain.core.registry as r; "
            "assert 'torch' not in sys.modules; "
            "r.SLOW_IMPORT_SECONDS = 0.1; "  # torch's import takes longer; the cpu plugin's own, milliseconds
            "print(r.ACCELERATORS.load('cpu').__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "CPUAccelerator", done.stderr
