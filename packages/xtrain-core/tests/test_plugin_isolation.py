"""One broken third-party plugin must not break anyone else: ``auto`` skips it with one warning, asking for it by
name is a ConfigError naming its entry point and distribution, and the unrelated plugins keep working.

Each defect is a real installed distribution (a dist-info with entry points on ``sys.path``).
"""

from __future__ import annotations

import warnings

import pytest

from plugin_helpers import Install, auto_warnings, quiet_trainer
from xtrain.core import ConfigError
from xtrain.core._internal.resolve import resolve
from xtrain.core.defaults import CPUAccelerator
from xtrain.core.registry import ACCELERATORS, PluginWarning
from xtrain.core.testing import AcceleratorConformance, TinyClassifier, tiny_loaders

NPU = '''
from xtrain.core.defaults.cpu import CPUAccelerator

class NPU(CPUAccelerator):
    """An NPU that would win accelerator='auto' if it worked."""
    name = "npu"
    auto_priority = 100
{body}
'''
RAISES_IN_INIT = NPU.format(body="    def __init__(self):\n        raise RuntimeError('driver handle is stale')\n")
RAISES_IN_IS_AVAILABLE = NPU.format(
    body="    @classmethod\n    def is_available(cls):\n        raise OSError('libnpu.so: cannot open shared object')\n")
ABSTRACT = '''
from xtrain.core.accelerator import Accelerator

class NPU(Accelerator):
    """Forgot device_count."""
    name = "npu"
    device_type = "cpu"
    auto_priority = 100

    @classmethod
    def is_available(cls):
        return True
'''
EXITS_AT_IMPORT = "import sys\nsys.exit(3)\n"
EXITS_IN_IS_AVAILABLE = NPU.format(body="    @classmethod\n    def is_available(cls):\n        raise SystemExit(4)\n")
COUNT_RAISES = NPU.format(body="    @classmethod\n    def is_available(cls):\n        return True\n"
                               "    @classmethod\n    def device_count(cls):\n"
                               "        raise RuntimeError('npuGetDeviceCount failed: driver/library mismatch')\n")
CLAIMS_CPU = NPU.format(body="").replace('name = "npu"', 'name = "cpu"')
UNAVAILABLE = NPU.format(body='''    @classmethod
    def is_available(cls):
        return False

    @classmethod
    def unavailable_reason(cls):
        return "ACME_NPU_COUNT is not set; export ACME_NPU_COUNT=<number of NPUs>"
''')



def by_name(accelerator: str) -> str:
    with pytest.raises(ConfigError) as info:
        resolve(accelerator=accelerator)
    return str(info.value)


@pytest.mark.parametrize(("target", "modules", "error"), [
    ("no_such_npu_module:NPU", {}, "ModuleNotFoundError: No module named 'no_such_npu_module'"),
    ("npu_mod:Missing", {"npu_mod": NPU.format(body="")}, "AttributeError"),
    ("npu_mod:NPU", {"npu_mod": "import torch\nraise ImportError('libnpu 3 needs torch<2')\n"}, "libnpu 3 needs"),
], ids=["missing-module", "missing-class", "import-raises"])
def test_a_plugin_that_fails_to_import(installed_distribution: Install, target: str, modules: dict[str, str],
                                       error: str) -> None:
    installed_distribution("acme-npu", {"xtrain.accelerators": {"npu": target}}, modules)
    trainer, messages = auto_warnings()
    assert trainer.strategy.accelerator.name == "cpu", "auto must fall back to the next available accelerator"
    assert len(messages) == 1, messages
    assert messages[0].startswith("accelerator='auto' skipped 'npu':")
    for fact in (f"entry point 'npu = {target}' of acme-npu 1.0.0", error, "pip install -U acme-npu",
                 "report this to the maintainers of acme-npu"):
        assert fact in messages[0], (fact, messages[0])
    message = by_name("npu")
    assert message.startswith("accelerator='npu': the plugin (entry point 'npu = ") and error in message
    assert "Fix: pip install -U acme-npu; if that does not help, report this to the maintainers of acme-npu" in message
    _, again = auto_warnings()
    assert again == [], "the warning is given once, not at every Trainer()"


def test_an_accelerator_whose_init_raises(installed_distribution: Install) -> None:
    installed_distribution("acme-npu", {"xtrain.accelerators": {"npu": "npu_mod:NPU"}}, {"npu_mod": RAISES_IN_INIT})
    trainer, messages = auto_warnings()
    assert trainer.strategy.accelerator.name == "cpu"
    assert len(messages) == 1 and "RuntimeError: driver handle is stale" in messages[0], messages
    trainer = quiet_trainer(max_steps=3)
    trainer.fit(TinyClassifier(), tiny_loaders()[0])
    assert trainer.global_step == 3, "the default Trainer still trains"
    assert "acme-npu 1.0.0" in messages[0]
    message = by_name("npu")
    assert "could not be created: RuntimeError: driver handle is stale" in message
    assert "entry point 'npu = npu_mod:NPU' of acme-npu 1.0.0" in message


def test_an_accelerator_whose_availability_check_raises(installed_distribution: Install) -> None:
    installed_distribution("acme-npu", {"xtrain.accelerators": {"npu": "npu_mod:NPU"}},
                           {"npu_mod": RAISES_IN_IS_AVAILABLE})
    trainer, messages = auto_warnings()
    assert trainer.strategy.accelerator.name == "cpu"
    assert len(messages) == 1 and "OSError: libnpu.so" in messages[0] and "acme-npu" in messages[0], messages
    message = by_name("npu")
    assert "(entry point 'npu = npu_mod:NPU' of acme-npu 1.0.0) raised OSError: libnpu.so" in message
    assert "in is_available()" in message


def test_an_accelerator_missing_an_abstract_method(installed_distribution: Install) -> None:
    installed_distribution("acme-npu", {"xtrain.accelerators": {"npu": "npu_mod:NPU"}}, {"npu_mod": ABSTRACT})
    trainer, messages = auto_warnings()
    assert trainer.strategy.accelerator.name == "cpu"
    assert len(messages) == 1 and "does not implement the abstract methods device_count" in messages[0], messages
    message = by_name("npu")
    assert "entry point 'npu = npu_mod:NPU' of acme-npu 1.0.0" in message and "device_count" in message


def test_a_strategy_and_a_precision_whose_init_raises(installed_distribution: Install) -> None:
    source = ("from xtrain.core.defaults import SingleDeviceStrategy, SinglePrecision\n"
              "class Boom(SingleDeviceStrategy):\n    name = 'boom'\n"
              "    def __init__(self):\n        raise ValueError('needs ACME_LICENSE')\n"
              "class BoomPrecision(SinglePrecision):\n    name = 'boom-true'\n"
              "    def __init__(self):\n        raise ValueError('needs ACME_LICENSE')\n")
    installed_distribution("acme-boom", {"xtrain.strategies": {"boom": "boom_mod:Boom"},
                                         "xtrain.precision": {"boom-true": "boom_mod:BoomPrecision"}},
                           {"boom_mod": source})
    _, messages = auto_warnings()
    assert messages == [], "strategies and precisions are not looked through by auto: nothing to warn about"
    for argument, value in (("strategy", "boom"), ("precision", "boom-true")):
        with pytest.raises(ConfigError) as info:
            resolve(**{argument: value})
        message = str(info.value)
        assert message.startswith(f"{argument}={value!r}: the plugin (entry point '{value} = boom_mod:")
        assert "acme-boom 1.0.0) could not be created: ValueError: needs ACME_LICENSE" in message
        assert isinstance(info.value.__cause__, ValueError)


def test_two_distributions_claiming_one_name_warn_during_auto(installed_distribution: Install) -> None:
    installed_distribution("first-npu", {"xtrain.accelerators": {"npu": "npu_a:NPU"}}, {"npu_a": NPU.format(body="")})
    installed_distribution("second-npu", {"xtrain.accelerators": {"npu": "npu_b:NPU"}}, {"npu_b": NPU.format(body="")})
    trainer, messages = auto_warnings()
    assert trainer.strategy.accelerator.name == "cpu"
    assert len(messages) == 1, messages
    assert "more than one distribution: first-npu and second-npu" in messages[0]
    assert "first-npu and second-npu" in by_name("npu")


def test_a_broken_cluster_environment_does_not_break_the_default_trainer(installed_distribution: Install) -> None:
    installed_distribution("acme-cluster", {"xtrain.environments": {"acme": "no_such_cluster_module:Acme"}})
    trainer, messages = auto_warnings()
    assert type(trainer.strategy.cluster_environment).__name__ == "LocalEnvironment"
    assert len(messages) == 1 and "the cluster environment detection skipped 'acme'" in messages[0], messages
    assert "acme-cluster 1.0.0" in messages[0] and "ModuleNotFoundError" in messages[0]


def test_an_unavailable_accelerator_says_how_to_make_it_available(installed_distribution: Install) -> None:
    installed_distribution("acme-npu", {"xtrain.accelerators": {"npu": "npu_mod:NPU"}}, {"npu_mod": UNAVAILABLE})
    message = by_name("npu")
    assert message.startswith("accelerator='npu': 'npu' is not available on this machine. ACME_NPU_COUNT is not set; "
                              "export ACME_NPU_COUNT=<number of NPUs>.")
    assert "'cpu'" in message and message.endswith("or 'auto'; or make it available as said.")


def test_unrelated_plugins_still_pass_their_kit_with_a_broken_one_installed(installed_distribution: Install) -> None:
    installed_distribution("acme-npu", {"xtrain.accelerators": {"npu": "no_such_npu_module:NPU"}})

    class KitOnCPU(AcceleratorConformance):
        accelerator = CPUAccelerator

    kit = KitOnCPU()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginWarning)
        kit.test_auto_selection_follows_the_declared_priority()
        kit.test_strategy_device_comes_from_the_accelerator()
        kit.test_unavailable_is_refused_listing_what_is_available()
        kit.test_is_registered_by_name()
    assert "npu" in ACCELERATORS.names()


@pytest.mark.parametrize(("source", "error"), [(EXITS_AT_IMPORT, "could not be imported: SystemExit: 3"),
                                                (EXITS_IN_IS_AVAILABLE, "raised SystemExit: 4")],
                         ids=["at-import", "in-is-available"])
def test_a_plugin_calling_sys_exit_does_not_end_the_program(installed_distribution: Install, source: str,
                                                            error: str) -> None:
    installed_distribution("acme-npu", {"xtrain.accelerators": {"npu": "npu_mod:NPU"}}, {"npu_mod": source})
    trainer, messages = auto_warnings()  # a SystemExit escaping here would fail the test run
    assert trainer.strategy.accelerator.name == "cpu"
    assert len(messages) == 1 and error in messages[0] and "acme-npu 1.0.0" in messages[0], messages
    assert error in by_name("npu")


def test_an_accelerator_that_cannot_count_its_devices(installed_distribution: Install) -> None:
    installed_distribution("acme-npu", {"xtrain.accelerators": {"npu": "npu_mod:NPU"}}, {"npu_mod": COUNT_RAISES})
    trainer, messages = auto_warnings()
    assert trainer.strategy.accelerator.name == "cpu", "auto skips it instead of dying in device_count()"
    assert len(messages) == 1 and "npuGetDeviceCount failed" in messages[0], messages
    message = by_name("npu")
    assert message.startswith("accelerator='npu': the plugin (entry point 'npu = npu_mod:NPU' of acme-npu 1.0.0) "
                              "raised RuntimeError: npuGetDeviceCount failed")
    assert "counting its devices" in message and "Fix: pip install -U acme-npu" in message


def test_a_third_party_claim_on_a_built_in_name_is_ignored(installed_distribution: Install) -> None:
    installed_distribution("evil-cpu", {"xtrain.accelerators": {"cpu": "evil_mod:NPU"},
                                        "xtrain.strategies": {"single_device": "evil_mod:Nope"}},
                           {"evil_mod": CLAIMS_CPU})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = quiet_trainer(accelerator="cpu", max_steps=2)
        trainer.fit(TinyClassifier(), tiny_loaders()[0])
    assert type(trainer.strategy.accelerator) is CPUAccelerator, "xtrain-core's cpu, not the third party's"
    assert type(trainer.strategy).__module__.startswith("xtrain.core"), type(trainer.strategy)
    assert trainer.global_step == 2
    messages = [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]
    assert len(messages) == 1, messages  # one warning for the package, naming every claim
    assert messages[0].startswith("evil-cpu 1.0.0 registers first-party names 'cpu' (xtrain.accelerators, provided "
                                  "by xtrain-core), 'single_device' (xtrain.strategies, provided by xtrain-core); "
                                  "they are ignored")
    assert "Fix: the maintainers of evil-cpu should register other names" in messages[0]
    default, again = auto_warnings()
    assert type(default.strategy.accelerator) is CPUAccelerator and again == [], "warned once per process"
