"""Horovod's configuration, checked without Horovod: the install error, lazy imports, the environment, the launcher.

These run in the default suite (no Horovod build needed). Training with Horovod is in ``test_horovod.py``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from strategies_helpers import quiet_trainer
from xtrain.core import ConfigError
from xtrain.core.defaults import LocalEnvironment
from xtrain.strategies.environments import HorovodEnvironment, MPIEnvironment, SLURMEnvironment
from xtrain.strategies.horovod import HorovodStrategy
from xtrain.strategies.launchers import HorovodLauncher

HOROVODRUN = {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2",
              "HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "1", "HOROVOD_HOSTNAME": "localhost",
              "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.5", "HOROVOD_GLOO_RENDEZVOUS_PORT": "4242"}


def test_missing_horovod_is_a_config_error_with_the_build_command(clean: pytest.MonkeyPatch) -> None:
    for name in ("horovod", "horovod.torch"):
        clean.setitem(sys.modules, name, None)  # makes `import horovod.torch` fail, installed or not
    with pytest.raises(ConfigError) as info:
        quiet_trainer(strategy="horovod", devices=2)
    message = str(info.value)
    assert message.startswith("strategy='horovod': needs Horovod, which is not installed.")
    assert "python tools/build_horovod.py" in message and "C++17" in message


def test_listing_and_loading_names_does_not_import_horovod() -> None:
    code = ("import sys; import xtrain.strategies; from xtrain.core.registry import STRATEGIES, ENVIRONMENTS; "
            "STRATEGIES.names(); STRATEGIES.load('horovod'); ENVIRONMENTS.load('horovod').detect(); "
            "from xtrain.strategies.launchers import HorovodLauncher; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'horovod'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_horovodrun_variables_give_ranks_and_win_over_slurm_and_mpi(clean: pytest.MonkeyPatch) -> None:
    for k, v in {**HOROVODRUN, "SLURM_NTASKS": "2", "SLURM_JOB_NAME": "train", "OMPI_COMM_WORLD_SIZE": "2"}.items():
        clean.setenv(k, v)
    assert HorovodEnvironment.detect() and SLURMEnvironment.detect() and MPIEnvironment.detect()
    strategy = quiet_trainer(strategy="ddp", devices=2).strategy
    env = strategy.cluster_environment
    assert isinstance(env, HorovodEnvironment)
    assert (strategy.global_rank, strategy.local_rank, strategy.world_size, strategy.node_rank) == (1, 1, 2, 0)
    assert env.main_address == "10.0.0.5" and 20000 <= env.main_port < 40000  # DDP under horovodrun
    assert env.main_port == HorovodEnvironment().main_port, "every rank must derive the same port"


def test_devices_must_match_what_horovodrun_started(clean: pytest.MonkeyPatch) -> None:
    for k, v in HOROVODRUN.items():
        clean.setenv(k, v)
    with pytest.raises(ConfigError, match=r"devices=4: asks for 4 process\(es\) per node, but horovodrun started 2"):
        quiet_trainer(strategy="ddp", devices=4)


def test_launcher_refuses_several_nodes_and_names_horovodrun() -> None:
    launcher = HorovodLauncher(num_processes=2, num_nodes=2, environment=LocalEnvironment())
    with pytest.raises(ConfigError, match="num_nodes=2: xtrain starts Horovod ranks on one machine only") as info:
        launcher.check()
    assert "horovodrun -np N -H host1:n,host2:n" in str(info.value)


@pytest.mark.parametrize(("options", "argument"), [({"compression": "int8"}, "compression"),
                                                   ({"backward_passes_per_step": 0}, "backward_passes_per_step")])
def test_invalid_options_are_config_errors(options: dict[str, object], argument: str) -> None:
    with pytest.raises(ConfigError, match=f"^{argument}="):
        HorovodStrategy(**options)  # type: ignore[arg-type]
