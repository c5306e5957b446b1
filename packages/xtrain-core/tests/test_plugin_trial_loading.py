"""Loading plugins: an import that runs long names itself while it runs, ``xtrain --help`` imports no plugin and
lists every group, ``refresh()`` picks up a fixed plugin, and a plugin given in the wrong form or to the wrong
argument is answered with the spelling that works.

Each plugin is a real installed distribution (a dist-info with entry points on ``sys.path``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xtrain.core import ConfigError
from xtrain.core import registry as registry_module
from xtrain.core._internal.cli.catalogue import catalogue
from xtrain.core._internal.resolve import resolve
from xtrain.core.defaults import CPUAccelerator, SingleDeviceStrategy, SinglePrecision, TorchCheckpointIO
from xtrain.core.registry import ACCELERATORS, PluginWarning

Install = Callable[..., Any]

SLEEPS = '''
import time
time.sleep({seconds})
from xtrain.core.defaults.cpu import CPUAccelerator

class Acc(CPUAccelerator):
    """Slow at import."""
    name = "hangacc"
'''
MARKS_IMPORT = '''
import os
open(os.environ["XTRAIN_TRIAL_MARKER"], "w").write("imported")
raise RuntimeError("imported by --help")
'''


class _Recorder:
    """sys.stderr that remembers when each piece was written."""

    def __init__(self) -> None:
        self.writes: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.writes.append((time.monotonic(), text))
        return len(text)

    def flush(self) -> None:
        pass


def test_a_long_import_names_its_plugin_while_it_is_still_running(installed_distribution: Install,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "STUCK_IMPORT_SECONDS", 0.2)
    installed_distribution("acme-hang", {"xtrain.accelerators": {"hangacc": "hang_mod:Acc"}},
                           {"hang_mod": SLEEPS.format(seconds=2.0)})
    recorder = _Recorder()
    monkeypatch.setattr(sys, "stderr", recorder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginWarning)  # the slow-import warning after it returns
        ACCELERATORS.load("hangacc")
    returned = time.monotonic()
    notices = [(at, text) for at, text in recorder.writes if "hangacc" in text]
    assert len(notices) == 1, recorder.writes
    at, text = notices[0]
    assert returned - at > 1.0, "the notice comes while the import is still running, not after it"
    assert text.startswith("xtrain: still importing the accelerator plugin 'hangacc' (entry point 'hangacc = "
                           "hang_mod:Acc' of acme-hang 1.0.0) after 0.2 s."), text
    assert "pip uninstall acme-hang" in text and "Ctrl-C" in text, text


def test_a_merely_slow_import_gets_the_warning_alone(installed_distribution: Install,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Between SLOW_IMPORT_SECONDS and STUCK_IMPORT_SECONDS: one PluginWarning with the seconds, no stderr notice."""
    monkeypatch.setattr(registry_module, "SLOW_IMPORT_SECONDS", 0.1)
    monkeypatch.setattr(registry_module, "STUCK_IMPORT_SECONDS", 5.0)
    installed_distribution("acme-slow", {"xtrain.accelerators": {"slowacc": "slow_mod:Acc"}},
                           {"slow_mod": SLEEPS.format(seconds=0.5)})
    recorder = _Recorder()
    monkeypatch.setattr(sys, "stderr", recorder)
    with pytest.warns(PluginWarning, match="slowacc") as record:
        ACCELERATORS.load("slowacc")
    assert len([w for w in record if "slowacc" in str(w.message)]) == 1
    assert not [text for _, text in recorder.writes if "slowacc" in text], recorder.writes


def test_a_fast_import_prints_nothing(installed_distribution: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "STUCK_IMPORT_SECONDS", 0.2)
    installed_distribution("acme-fast", {"xtrain.accelerators": {"hangacc": "fast_mod:Acc"}},
                           {"fast_mod": SLEEPS.format(seconds=0)})
    recorder = _Recorder()
    monkeypatch.setattr(sys, "stderr", recorder)
    ACCELERATORS.load("hangacc")
    time.sleep(0.4)
    assert recorder.writes == [], "the watch is cancelled when the import returns"


def test_help_imports_no_plugin_and_lists_every_group(installed_distribution: Install, tmp_path: Path) -> None:
    site = installed_distribution("acme-all", {group: {"acmeall": "acme_all_mod:Nope"} for group in (
        "xtrain.accelerators", "xtrain.strategies", "xtrain.precision", "xtrain.checkpoint_io",
        "xtrain.environments")}, {"acme_all_mod": MARKS_IMPORT})
    marker = tmp_path / "imported"
    listing = catalogue()
    for title in ("accelerators (--trainer.accelerator):", "strategies (--trainer.strategy):",
                  "precisions (--trainer.precision):", "checkpoint IO (--trainer.plugins):",
                  "cluster environments (--trainer.plugins"):
        assert title in listing, listing
    assert listing.count("acmeall") == 5 and "[acme-all]" in listing and "  local " in listing, listing
    assert "acme_all_mod" not in sys.modules
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "XTRAIN_TRIAL_MARKER": str(marker)}
    done = subprocess.run([sys.executable, "-c", "from xtrain.core.cli import main; raise SystemExit(main())",
                           "--help"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "acmeall" in done.stdout and "torch " in done.stdout, done.stdout
    assert not marker.exists(), "xtrain --help imported a plugin"


def test_refresh_picks_up_a_fixed_plugin_in_a_running_process(installed_distribution: Install) -> None:
    site = installed_distribution("acme-fixme", {"xtrain.accelerators": {"fixme": "fixme_mod:Fixed"}},
                                  {"fixme_mod": "X = 1\n"})
    with pytest.raises(ConfigError, match="could not be imported: AttributeError"):
        ACCELERATORS.load("fixme")
    (site / "fixme_mod.py").write_text("X = 1\nfrom xtrain.core.defaults.cpu import CPUAccelerator\n\n\n"
                                       "class Fixed(CPUAccelerator):\n    name = 'fixme'\n")
    ACCELERATORS.refresh()
    assert ACCELERATORS.load("fixme").__name__ == "Fixed"


@pytest.mark.parametrize(("kwargs", "fact"), [
    ({"accelerator": CPUAccelerator}, "accelerator=<class 'xtrain.core.defaults.cpu.CPUAccelerator'>: is the class "
     "CPUAccelerator, not an instance of it. Fix: pass an instance: accelerator=CPUAccelerator(), or its registered "
     "name: accelerator='cpu'."),
    ({"strategy": SingleDeviceStrategy}, "Fix: pass an instance: strategy=SingleDeviceStrategy(), or its registered "
     "name: strategy='single_device'."),
    ({"precision": SinglePrecision}, "Fix: pass an instance: precision=SinglePrecision(), or its registered name: "
     "precision='32-true'."),
    ({"plugins": [TorchCheckpointIO]}, "Fix: pass an instance: plugins=[TorchCheckpointIO()], or its registered "
     "name: plugins=['torch']."),
    ({"plugins": [CPUAccelerator]}, "It is an accelerator, which goes to accelerator=.... Fix: pass an instance: "
     "accelerator=CPUAccelerator(), or its registered name: accelerator='cpu'."),
    ({"plugins": ["single_device"]}, "plugins='single_device': is the name of a strategy plugin (xtrain-core), which is "
     "passed to strategy=. Fix: write strategy='single_device'."),
    ({"strategy": "32-true"}, "Fix: write precision='32-true'."),
], ids=["accelerator-class", "strategy-class", "precision-class", "io-class", "accelerator-in-plugins",
        "strategy-name-in-plugins", "precision-name-as-strategy"])
def test_a_plugin_in_the_wrong_form_gets_the_spelling_that_works(kwargs: dict[str, Any], fact: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve(**kwargs)
    assert fact in str(info.value), str(info.value)
