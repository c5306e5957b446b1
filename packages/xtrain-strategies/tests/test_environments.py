"""Cluster environments: detection order, ranks from each cluster's variables, and the mismatch errors.

The variables are set in this process (what the cluster would have set) and the Trainer is built for real: every
error here is raised by the validator before any process would start. The torchrun case runs real torchrun.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from strategies_helpers import quiet_trainer
from xtrain.core import ConfigError
from xtrain.core.defaults import LocalEnvironment
from xtrain.core.testing import run_processes, torchrun_command
from xtrain.strategies.environments import (
    KubeflowEnvironment,
    LSFEnvironment,
    MPIEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
)
from xtrain.strategies.environments.slurm import expand_hostlist

TORCHRUN = {"TORCHELASTIC_RUN_ID": "x", "RANK": "1", "LOCAL_RANK": "1", "GROUP_RANK": "0", "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"}
SLURM = {"SLURM_NTASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NNODES": "2",
         "SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train",
         "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_STEP_ID": "0"}
MPI = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
       "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_ess_base_jobid": "777"}


def _set(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    for k, v in variables.items():
        monkeypatch.setenv(k, v)


def test_detection_order_torchelastic_slurm_lsf_mpi_local(clean: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rankfile = tmp_path / "ranks"
    rankfile.write_text("batch\nnodeA\nnodeA\n")
    lsf = {"LSB_JOBID": "9", "LSB_DJOB_RANKFILE": str(rankfile), "JSM_NAMESPACE_LOCAL_RANK": "0",
           "JSM_NAMESPACE_SIZE": "2", "JSM_NAMESPACE_RANK": "0"}
    assert isinstance(quiet_trainer(devices=1).strategy.cluster_environment, LocalEnvironment)
    for variables, expected in [(MPI, MPIEnvironment), (lsf, LSFEnvironment), (SLURM, SLURMEnvironment),
                                (TORCHRUN, TorchElasticEnvironment)]:
        _set(clean, variables)  # each layer added on top: the higher priority must win
        strategy = quiet_trainer(strategy="ddp", devices=2, num_nodes=2 if expected is SLURMEnvironment else 1).strategy
        assert type(strategy.cluster_environment) is expected
        assert strategy.launcher is None  # the cluster started the processes


def test_kubeflow_is_only_explicit(clean: pytest.MonkeyPatch) -> None:
    _set(clean, {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "23456"})
    assert KubeflowEnvironment.detect_priority is None
    assert isinstance(quiet_trainer(devices=1).strategy.cluster_environment, LocalEnvironment)
    s = quiet_trainer(strategy="ddp", devices=1, num_nodes=2, plugins=["kubeflow"]).strategy
    assert (s.global_rank, s.world_size, s.node_rank, s.local_rank) == (1, 2, 1, 0)
    with pytest.raises(ConfigError, match=r"devices=2: Kubeflow's PyTorchJob runs one process per pod.*Fix:"):
        quiet_trainer(strategy="ddp", devices=2, num_nodes=2, plugins=["kubeflow"])


def test_ranks_come_from_each_cluster(clean: pytest.MonkeyPatch) -> None:
    _set(clean, SLURM)
    s = quiet_trainer(strategy="ddp", devices=2, num_nodes=2).strategy
    env = s.cluster_environment
    assert (s.global_rank, s.local_rank, s.node_rank, s.world_size) == (3, 1, 1, 4)
    assert env is not None and env.main_address == "gpu07" and 20000 <= env.main_port < 40000
    assert env.main_port == SLURMEnvironment().main_port  # every task derives the same port


def test_slurm_ntasks_per_node_must_match_devices(clean: pytest.MonkeyPatch) -> None:
    _set(clean, SLURM)
    with pytest.raises(ConfigError) as info:
        quiet_trainer(strategy="ddp", devices=4, num_nodes=2)
    message = str(info.value)
    assert message.startswith("devices=4:") and "--ntasks-per-node=2" in message
    assert "Fix: write devices=2, or start the job with --ntasks-per-node=4" in message
    with pytest.raises(ConfigError, match=r"num_nodes=1: does not match the 2 node\(s\) SLURM started.*--nodes=2"):
        quiet_trainer(strategy="ddp", devices=2, num_nodes=1)


@pytest.mark.parametrize("cluster", ["torchrun", "mpirun"])
def test_devices_auto_takes_the_processes_the_launcher_started(clean: pytest.MonkeyPatch, cluster: str) -> None:
    """Under torchrun the accelerator's own "auto" (1 on the CPU) was refused against torchrun's 2 processes."""
    _set(clean, TORCHRUN if cluster == "torchrun" else MPI)
    s = quiet_trainer().strategy
    assert (s.name, s.world_size, s.global_rank, s.processes_per_node) == ("ddp", 2, 1, 2)


def test_devices_auto_under_slurm_is_not_guessed(clean: pytest.MonkeyPatch) -> None:
    """A batch script is one process of a job of many tasks: "auto" keeps its meaning, and the mismatch is named."""
    _set(clean, {**SLURM, "SLURM_NNODES": "1", "SLURM_NTASKS": "2"})
    assert SLURMEnvironment().processes_per_node() is None
    with pytest.raises(ConfigError, match=r"devices=1: asks for 1 process\(es\) per node, but SLURM started 2"):
        quiet_trainer(strategy="ddp")


def test_interactive_slurm_allocation_is_not_srun(clean: pytest.MonkeyPatch) -> None:
    shell = {k: v for k, v in SLURM.items() if k != "SLURM_STEP_ID"}  # salloc's shell: no srun step
    _set(clean, {**shell, "SLURM_JOB_NAME": "bash"})
    assert not SLURMEnvironment.detect()


def test_srun_tasks_inside_an_interactive_allocation_are_one_job(clean: pytest.MonkeyPatch) -> None:
    """`salloc`, then `srun -n2 python train.py`: the tasks of the step are the ranks (each launched a run of its
    own); a one-task step (`srun --pty bash`) stays a shell where you start the ranks yourself."""
    _set(clean, {**SLURM, "SLURM_JOB_NAME": "interactive", "SLURM_STEP_NUM_TASKS": "4"})
    assert SLURMEnvironment.detect()
    clean.setenv("SLURM_STEP_NUM_TASKS", "1")
    assert not SLURMEnvironment.detect()


def test_a_batch_script_without_srun_is_refused_naming_srun(clean: pytest.MonkeyPatch) -> None:
    """sbatch's own shell has SLURM_NTASKS but is no task of a step: it waited 30 minutes for ranks that never came."""
    batch = {k: v for k, v in SLURM.items() if k != "SLURM_STEP_ID"} | {"SLURM_PROCID": "0", "SLURM_NODEID": "0",
                                                                          "SLURM_LOCALID": "0"}
    _set(clean, batch)
    with pytest.raises(ConfigError, match=r"SLURM job 4242 with SLURM_NTASKS=4, but SLURM_STEP_ID is not set.*"
                                          r"not started by srun.*srun python train\.py"):
        quiet_trainer(strategy="ddp", devices=2, num_nodes=2)


def test_a_salloc_shell_without_srun_names_srun(clean: pytest.MonkeyPatch) -> None:
    shell = {k: v for k, v in SLURM.items() if k not in ("SLURM_STEP_ID", "SLURM_PROCID", "SLURM_NODEID",
                                                          "SLURM_LOCALID")} | {"SLURM_NTASKS": "1", "SLURM_NNODES": "1",
                                                                               "SLURM_NTASKS_PER_NODE": "1"}
    _set(clean, shell)
    with pytest.raises(ConfigError, match=r"SLURM_(PROCID|NODEID|LOCALID) is not set: this process was not started "
                                          r"by srun.*--job-name=interactive"):
        quiet_trainer(strategy="ddp", devices=1)


def test_mpi_without_mpi4py_derives_a_port_on_one_node_and_refuses_several(clean: pytest.MonkeyPatch) -> None:
    _set(clean, MPI)
    env = MPIEnvironment(use_mpi4py=False)
    assert (env.global_rank(), env.local_rank(), env.world_size(), env.node_rank()) == (1, 1, 2, 0)
    assert env.main_address == "127.0.0.1" and env.main_port == MPIEnvironment(use_mpi4py=False).main_port
    with pytest.raises(ConfigError, match=r"devices=3: asks for 3 process\(es\) per node, but mpirun started 2"):
        quiet_trainer(strategy="ddp", devices=3, plugins=[MPIEnvironment(use_mpi4py=False)])
    _set(clean, {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "2"})
    with pytest.raises(ConfigError, match=r"spans 2 nodes.*Fix: pip install 'xtrain-strategies\[mpi\]'"):
        quiet_trainer(strategy="ddp", devices=2, num_nodes=2, plugins=[MPIEnvironment(use_mpi4py=False)])
    _set(clean, {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "23456"})
    env = MPIEnvironment(use_mpi4py=False)
    assert (env.main_address, env.main_port, env.node_rank()) == ("10.1.2.3", 23456, 1)


def test_lsf_hosts_from_the_rank_file(clean: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rankfile = tmp_path / "ranks"
    rankfile.write_text("launch\nhostA\nhostA\nhostB\nhostB\n")
    _set(clean, {"LSB_JOBID": "9", "LSB_DJOB_RANKFILE": str(rankfile), "JSM_NAMESPACE_LOCAL_RANK": "1",
                 "JSM_NAMESPACE_SIZE": "4", "JSM_NAMESPACE_RANK": "3"})
    env = LSFEnvironment()
    assert env.main_address == "hostA" and env.world_size() == 4 and env.local_rank() == 1
    env.validate_settings(num_devices=2, num_nodes=2)
    with pytest.raises(ConfigError, match="num_nodes=1"):
        env.validate_settings(num_devices=2, num_nodes=1)


def test_expand_hostlist() -> None:
    assert expand_hostlist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert expand_hostlist("n1") == ["n1"]


def test_devices_3_under_a_torchrun_world_of_2(tmp_path: Path) -> None:
    """Real torchrun: the mismatch is refused in every worker, with the fix, before training starts."""
    code = tmp_path / "check.py"
    code.write_text("from xtrain.core import Trainer, ConfigError\n"
                    "try:\n    Trainer(strategy='ddp', devices=3, accelerator='cpu')\n"
                    "except ConfigError as e:\n    print('REFUSED', e)\n    raise SystemExit(3)\n")
    result = run_processes([torchrun_command(str(code), nproc_per_node=2)], timeout=120, cwd=tmp_path)
    assert result.returncodes != [0]
    assert result.output.count("REFUSED devices=3: asks for 3 process(es) per node, but torchrun started 2") == 2
    assert "Fix: write devices=2, or start the job with --nproc-per-node=3." in result.output


def test_fork_missing_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test double for a missing OS feature (Windows has no fork): the start methods the platform offers."""
    import multiprocessing

    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    with pytest.raises(ConfigError) as info:
        quiet_trainer(strategy="ddp_notebook", devices=2)
    assert "'fork'" in str(info.value) and "Fix: use strategy='ddp_spawn'" in str(info.value)

