"""`import xtrain.core` stays cheap (about 11 ms after torch; tools/bench/step_overhead.py measures it).

Timing an import in a test would only be noise; these tests check what makes it slow instead: modules only a
checkpoint or a restart needs are imported at their first use, and few dataclasses are created on the way (each
one execs its generated methods: 0.3-0.9 ms here).
"""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import dataclasses, json, sys, torch
made = []
process_class = dataclasses._process_class
def counting(cls, *args, **kwargs):
    made.append(f"{cls.__module__}.{cls.__qualname__}")
    return process_class(cls, *args, **kwargs)
dataclasses._process_class = counting
import xtrain.core
from xtrain.core import Trainer, TrainModule
print(json.dumps({"made": [m for m in made if m.startswith("xtrain.")], "modules": sorted(sys.modules)}))
"""

# Imported when a checkpoint is saved or read, a run restarts, or a metric object is logged; never by the import.
_ON_FIRST_USE = ("isal", "xtrain.core.sharded_checkpoint", "xtrain.core.restarts",
                 "xtrain.core._internal.metric_objects", "xtrain.core._internal.restore_apply", "xtrain.core.demos",
                 "torchmetrics")
_DATACLASS_BUDGET = 2  # FitProgress and SchedulerConfig (public, dataclass behaviour relied on)


def _probe() -> dict[str, list[str]]:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120)
    result: dict[str, list[str]] = json.loads(out.stdout)
    return result


def test_import_leaves_checkpoint_and_restart_modules_for_their_first_use() -> None:
    loaded = set(_probe()["modules"])
    early = [name for name in _ON_FIRST_USE if name in loaded]
    assert not early, f"imported by `import xtrain.core`: {early}; import them where they are used"


def test_import_creates_few_dataclasses() -> None:
    made = _probe()["made"]
    assert len(made) <= _DATACLASS_BUDGET, (
        f"`import xtrain.core` created {len(made)} dataclasses ({made}); each costs 0.3-0.9 ms of every import. "
        "Use a NamedTuple or a plain class with __slots__ for records on the import path.")


def test_the_probe_sees_a_dataclass_made_at_import() -> None:
    """The counting hook works: a module that makes one is seen (so an empty list above means none)."""
    code = _PROBE.replace("import xtrain.core\n", "import xtrain.core\nimport xtrain.core.restarts\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    made = json.loads(out.stdout)["made"]
    assert "xtrain.core.restarts.RunIdentity" in made
