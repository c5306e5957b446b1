"""A plugin whose declared data is wrong (no ``name``, ``auto_priority = "10"``) is a broken plugin like any other:
``auto`` skips it with one PluginWarning, asking for it by name is a ConfigError at ``Trainer()`` naming the entry
point, its distribution, the attribute and the value; it never surfaces as a bare TypeError or AttributeError.

Each plugin is a real installed distribution (a dist-info with entry points on ``sys.path``).
"""

from __future__ import annotations

from typing import Any

import pytest

from plugin_helpers import Install, auto_warnings, quiet_trainer
from xtrain.core import ConfigError
from xtrain.core.defaults import CPUAccelerator, LocalEnvironment

NO_NAME = '''
from xtrain.core.accelerator import Accelerator

class Acc(Accelerator):
    """Forgot its name; would win 'auto' if it counted."""
    device_type = "cpu"
    auto_priority = 100

    @classmethod
    def is_available(cls):
        return True

    @classmethod
    def device_count(cls):
        return 1
'''
STR_PRIORITY = '''
from xtrain.core.defaults.cpu import CPUAccelerator

class Acc(CPUAccelerator):
    """Priority declared as a string."""
    name = "badprio"
    auto_priority = "10"
'''
STR_DETECT_PRIORITY = '''
from xtrain.core.defaults.local import LocalEnvironment

class Env(LocalEnvironment):
    """detect_priority declared as a string; detected everywhere."""
    name = "badprioenv"
    detect_priority = "7"

    @classmethod
    def detect(cls):
        return True
'''
NO_NAME_PRECISION = '''
from contextlib import nullcontext
from xtrain.core.precision import Precision

class Prec(Precision):
    """Forgot its name: the checkpoint manifest reads it at the first save."""
    has_forward_context = False
    converts_input = False

    def convert_module(self, module):
        return module

    def forward_context(self):
        return nullcontext()
'''
BAD_OTHERS = '''
from xtrain.core.defaults import SingleDeviceStrategy, TorchCheckpointIO

class Strat(SingleDeviceStrategy):
    name = "badlayout"
    checkpoint_layout = "zip"

class IO(TorchCheckpointIO):
    name = 7

def factory():
    io = TorchCheckpointIO()
    io.name = ""
    return io
'''


def refused(**kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        quiet_trainer(**kwargs)
    return str(info.value)


@pytest.mark.parametrize(("source", "fact"), [
    (NO_NAME, "names the class Acc, which does not declare name: the Accelerator contract needs a non-empty str"),
    (STR_PRIORITY, "names the class Acc, which declares auto_priority = '10' (str): the Accelerator contract needs an "
                   "int"),
], ids=["no-name", "str-priority"])
def test_an_accelerator_with_bad_declared_data_is_skipped_by_auto_and_refused_by_name(
        installed_distribution: Install, source: str, fact: str) -> None:
    installed_distribution("acme-bad", {"xtrain.accelerators": {"bad": "bad_acc:Acc"}}, {"bad_acc": source})
    trainer, messages = auto_warnings()  # was: AttributeError / TypeError in the sort of the auto choice
    assert type(trainer.strategy.accelerator) is CPUAccelerator
    assert len(messages) == 1, messages
    assert messages[0].startswith("accelerator='auto' skipped 'bad': the plugin (entry point 'bad = bad_acc:Acc' of "
                                  "acme-bad 1.0.0) "), messages[0]
    assert fact in messages[0] and "accelerator='bad'" not in messages[0], messages[0]
    message = refused(accelerator="bad")  # was: a ConfigError blaming device counting
    assert message.startswith("accelerator='bad': the plugin (entry point 'bad = bad_acc:Acc' of acme-bad 1.0.0) "
                              + fact), message
    assert "Fix: pip install -U acme-bad; if that does not help, report this to the maintainers of acme-bad" in message
    assert "counting its devices" not in message


def test_an_environment_with_a_str_detect_priority_does_not_break_the_default_trainer(
        installed_distribution: Install) -> None:
    installed_distribution("acme-env", {"xtrain.environments": {"badprioenv": "bad_env:Env"}},
                           {"bad_env": STR_DETECT_PRIORITY})
    trainer, messages = auto_warnings()  # was: TypeError in sorted(detected)
    assert type(trainer.strategy.cluster_environment) is LocalEnvironment
    assert len(messages) == 1, messages
    assert messages[0].startswith("the cluster environment detection skipped 'badprioenv': the plugin (entry point "
                                  "'badprioenv = bad_env:Env' of acme-env 1.0.0) names the class Env, which declares "
                                  "detect_priority = '7' (str)"), messages[0]
    message = refused(plugins=["badprioenv"])
    assert "detect_priority = '7'" in message and "acme-env 1.0.0" in message, message


def test_a_precision_without_a_name_is_refused_at_trainer_time(installed_distribution: Install) -> None:
    """It used to pass ``Trainer()`` and crash at the first checkpoint save (the manifest reads its name)."""
    installed_distribution("acme-prec", {"xtrain.precision": {"nonameprec": "bad_prec:Prec"}},
                           {"bad_prec": NO_NAME_PRECISION})
    message = refused(accelerator="cpu", precision="nonameprec")
    assert message.startswith("precision='nonameprec': the plugin (entry point 'nonameprec = bad_prec:Prec' of "
                              "acme-prec 1.0.0) names the class Prec, which does not declare name"), message


@pytest.mark.parametrize(("argument", "group", "value", "target", "fact"), [
    ("strategy", "xtrain.strategies", "badlayout", "bad_others:Strat", "checkpoint_layout = 'zip' (str): the "
                                                                       "Strategy contract needs 'full' or 'sharded'"),
    ("plugins", "xtrain.checkpoint_io", "badio", "bad_others:IO", "declares name = 7 (int)"),
    ("plugins", "xtrain.checkpoint_io", "badfactory", "bad_others:factory", "returned a TorchCheckpointIO, which "
                                                                            "declares name = '' (str)"),
], ids=["strategy-layout", "io-int-name", "factory-instance"])
def test_every_group_checks_its_declared_data(installed_distribution: Install, argument: str, group: str, value: str,
                                              target: str, fact: str) -> None:
    installed_distribution("acme-others", {group: {value: target}}, {"bad_others": BAD_OTHERS})
    message = refused(accelerator="cpu", **{argument: [value] if argument == "plugins" else value})
    assert message.startswith(f"{argument}={value!r}: the plugin (entry point '{value} = {target}' of acme-others "
                              f"1.0.0) "), message
    assert fact in message, message
