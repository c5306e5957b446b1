"""A third party cannot take over a first-party name, even when the first-party package is not installed, and the
warnings about installed plugins are few and readable: one per distribution that claims first-party names, no
doubled labels, attributed to the user's line.

Each plugin is a real installed distribution (a dist-info with entry points on ``sys.path``).
"""

from __future__ import annotations

import sys
import warnings

import pytest

from plugin_helpers import Install, plugin_warnings, quiet_trainer
from xtrain.core import ConfigError, Trainer
from xtrain.core._internal import hints
from xtrain.core.defaults import CPUAccelerator
from xtrain.core.registry import ACCELERATORS, PluginWarning

SQUAT = '''
from xtrain.core.defaults.cpu import CPUAccelerator

class Acc(CPUAccelerator):
    """Not really a GPU."""
    name = "npu9"
    auto_priority = 100
'''
NEVER_IMPORT = "raise RuntimeError('a claim on a first-party name must never be imported')\n"


def trainer_here() -> Trainer:
    """A Trainer made on a line of this file: the user's line, where the plugin warnings must point."""
    return Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)


def test_a_first_party_name_whose_package_is_missing_cannot_be_taken_over(
        installed_distribution: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpu`` from xtrain-squat with xtrain-accelerators absent: here a first-party name that no installed package
    registers (the table gets one more xtrain-accelerators name; the suite's environment has every first-party
    package installed)."""
    monkeypatch.setitem(hints._HINTS["xtrain.accelerators"], "npu9", "xtrain-accelerators")
    installed_distribution("xtrain-squat", {"xtrain.accelerators": {"npu9": "squat_mod:Acc"}}, {"squat_mod": SQUAT})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert "npu9" not in ACCELERATORS.names()
        with pytest.raises(ConfigError) as info:
            quiet_trainer(accelerator="npu9")
    message = str(info.value)
    assert message.startswith("accelerator='npu9': is provided by xtrain-accelerators, which is not installed."), message
    assert message.endswith("Fix: pip install xtrain-accelerators"), message
    told = [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]
    assert len(told) == 1, told
    assert told[0].startswith("xtrain-squat 1.0.0 registers first-party names 'npu9' (xtrain.accelerators, provided "
                              "by xtrain-accelerators, which is not installed); they are ignored"), told[0]
    assert "uninstall xtrain-squat" in told[0]
    trainer = quiet_trainer()
    assert type(trainer.strategy.accelerator) is CPUAccelerator, "auto does not pick the squatter either"
    assert "squat_mod" not in sys.modules


def test_a_first_party_name_whose_package_is_installed_stays_first_party(installed_distribution: Install) -> None:
    installed_distribution("xtrain-squat", {"xtrain.accelerators": {"gpu": "squat_mod:Acc"}},
                           {"squat_mod": NEVER_IMPORT})
    told = plugin_warnings(ACCELERATORS.names)[1]
    assert len(told) == 1 and "'gpu' (xtrain.accelerators, provided by xtrain-accelerators)" in str(told[0].message)
    assert ACCELERATORS.distribution_of("gpu") == "xtrain-accelerators"
    assert ACCELERATORS.load("gpu").__module__.startswith("xtrain.accelerators")
    assert "squat_mod" not in sys.modules


def test_one_warning_per_distribution_claiming_first_party_names(installed_distribution: Install) -> None:
    installed_distribution("xtrain-collide", {"xtrain.accelerators": {"cpu": "collide:EvilCPU"},
                                              "xtrain.strategies": {"ddp": "collide:EvilDDP"},
                                              "xtrain.precision": {"32-true": "collide:EvilP"},
                                              "xtrain.environments": {"local": "collide:EvilEnv"},
                                              "xtrain.checkpoint_io": {"torch": "collide:EvilIO"}},
                           {"collide": NEVER_IMPORT})
    caught = plugin_warnings(trainer_here)[1]
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert message.startswith("xtrain-collide 1.0.0 registers first-party names "), message
    for claim in ("'cpu' (xtrain.accelerators, provided by xtrain-core)",
                  "'ddp' (xtrain.strategies, provided by xtrain-strategies)",
                  "'32-true' (xtrain.precision, provided by xtrain-core)",
                  "'local' (xtrain.environments, provided by xtrain-core)",
                  "'torch' (xtrain.checkpoint_io, provided by xtrain-core)"):
        assert claim in message, (claim, message)
    assert "they are ignored" in message and "accelerator='cpu'" not in message, message
    assert caught[0].filename == __file__, f"attributed to {caught[0].filename}:{caught[0].lineno}, not the user's line"
    assert "collide" not in sys.modules
    assert plugin_warnings(quiet_trainer)[1] == [], "once per process"


def test_a_skipped_plugin_is_labelled_once_and_attributed_to_the_users_line(installed_distribution: Install) -> None:
    installed_distribution("acme-badimp", {"xtrain.accelerators": {"badimp": "no_such_badimp_module:Acc"}})
    caught = plugin_warnings(trainer_here)[1]
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert message.startswith("accelerator='auto' skipped 'badimp': the plugin (entry point 'badimp = "
                              "no_such_badimp_module:Acc' of acme-badimp 1.0.0) could not be imported"), message
    assert "accelerator='badimp'" not in message, "no second label"
    assert caught[0].filename == __file__, f"attributed to {caught[0].filename}:{caught[0].lineno}"


def test_plugin_notices_never_become_errors_under_warnings_as_errors(
        installed_distribution: Install, capsys: pytest.CaptureFixture[str]) -> None:
    """Outside trial P: ``-W error`` (a test suite's ``filterwarnings = error``) turned the notice about a package
    claiming ``cpu`` into an exception out of ``Trainer(accelerator='cpu')``; a skipped broken plugin did the same to
    ``Trainer()``. The notices then go to stderr and the Trainer is built."""
    installed_distribution("xtrain-bad-ddp", {"xtrain.strategies": {"ddp": "bad_ddp:S"}}, {"bad_ddp": NEVER_IMPORT})
    installed_distribution("acme-broken", {"xtrain.accelerators": {"brokenacc": "no_such_brokenacc_module:Acc"}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer = trainer_here()
    assert type(trainer.strategy.accelerator) is CPUAccelerator
    err = capsys.readouterr().err
    assert "PluginWarning: xtrain-bad-ddp 1.0.0 registers first-party names 'ddp' (xtrain.strategies" in err, err
    assert "e.g. strategy=TheirStrategy())" in err and "accelerator=TheirAccelerator()" not in err, err
    assert "PluginWarning: accelerator='auto' skipped 'brokenacc'" in err, err


def test_the_conformance_kits_refuse_a_class_where_a_registered_name_goes() -> None:
    from xtrain.core.testing import PrecisionConformance, StrategyConformance
    from xtrain.core.testing.models import TinyClassifier

    with pytest.raises(TypeError, match=r"Kit.strategy = TinyClassifier: this kit takes the name the plugin is "
                                        r"registered under in the 'xtrain.strategies' entry-point group"):
        type("Kit", (StrategyConformance,), {"strategy": TinyClassifier})
    with pytest.raises(TypeError, match=r"write precision = \"<that name>\""):
        type("Kit", (PrecisionConformance,), {"precision": TinyClassifier})
    assert type("Fine", (StrategyConformance,), {"strategy": "ddp"}).strategy == "ddp"


def test_plugin_list_shows_every_plugin_and_check_names_the_broken_ones(
        installed_distribution: Install, capsys: pytest.CaptureFixture[str]) -> None:
    """Outside trial P found no way to see which installed plugins load: ``xtrain plugin list [--check]``."""
    pytest.importorskip("jsonargparse")
    from xtrain.core._internal.cli.main import run

    installed_distribution("acme-listed", {"xtrain.accelerators": {"listedbad": "no_such_listed_module:Acc"}})
    assert run(["plugin", "list"]) == 0
    out = capsys.readouterr().out
    assert "xtrain.accelerators (accelerator=...)" in out and "xtrain.strategies (strategy=...)" in out, out
    assert "  listedbad: entry point 'listedbad = no_such_listed_module:Acc' of acme-listed 1.0.0\n" in out, out
    assert "  cpu: entry point 'cpu = xtrain.core.defaults.cpu:CPUAccelerator' of xtrain-core" in out, out
    assert "no_such_listed_module" not in sys.modules
    assert run(["plugin", "list", "--check"]) == 1
    out = capsys.readouterr().out
    assert "cpu = xtrain.core.defaults.cpu:CPUAccelerator' of xtrain-core" in out and "[loads]" in out, out
    broken = out.split("listedbad:", 1)[1]
    assert broken.splitlines()[1].startswith("      BROKEN: accelerator='listedbad': the plugin (entry point"), out
    assert "ModuleNotFoundError" in broken and out.rstrip().endswith("1 plugin(s) failed to load"), out
