"""xtrain under a real SLURM cluster: slurmctld, slurmd and munged on this machine (``tools/slurm_cluster.py``).

``nox -s slurm`` starts the cluster, sets ``XTRAIN_SLURM_TESTS=1`` and ``SLURM_CONF``, runs this file and tears the
cluster down. Every job is ``scripts/slurm_job.sh`` (``srun --kill-on-bad-exit=1`` of ``scripts/slurm_train.py``, a
2-task DDP job on the CPU): the ranks come from SLURM's own variables, the requeue is SLURM's, the signals are sent by
``scancel`` and by ``--signal=USR1@N``. Each wait is bounded; a job still running at a timeout is cancelled.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

SCRIPTS = Path(__file__).parent / "scripts"
JOB = SCRIPTS / "slurm_job.sh"
TRAIN = SCRIPTS / "slurm_train.py"
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}
TOTAL_STEPS = 24  # 192 samples, 12 per batch, 2 ranks: 8 steps per epoch, 3 epochs

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(os.environ.get("XTRAIN_SLURM_TESTS") != "1",
                       reason="needs a SLURM cluster: run `nox -s slurm` (it starts one on this machine)"),
]


def slurm(*args: str, timeout: float = 30) -> str:
    return subprocess.run(list(args), capture_output=True, text=True, check=True, timeout=timeout).stdout


@pytest.fixture(scope="module", autouse=True)
def _cluster() -> None:
    """The session asked for these tests, so a cluster that is not there is a failure, not a skip."""
    if shutil.which("sbatch") is None or "SLURM_CONF" not in os.environ:
        pytest.fail("XTRAIN_SLURM_TESTS=1 but sbatch or SLURM_CONF is missing: start the cluster with "
                    "`python tools/slurm_cluster.py start DIR` and export SLURM_CONF=DIR/slurm.conf")
    states = slurm("sinfo", "-h", "-N", "-o", "%T").split()
    if states != ["idle"]:
        pytest.fail(f"the test cluster's node is {states}, not ['idle']")


class Job:
    """One sbatch'ed run of ``slurm_train.py`` in ``root``; its output accumulates over requeues in ``out``."""

    def __init__(self, root: Path, name: str, *sbatch: str, step_sleep: float = 0.0,
                 train_args: tuple[str, ...] = ()) -> None:
        self.root, self.out = root, root / f"{name}.out"
        self.id = slurm("sbatch", "--parsable", f"--output={self.out}", f"--chdir={root}", f"--job-name={name}",
                        *sbatch, str(JOB), sys.executable, str(TRAIN), str(root / "runs"),
                        "--step-sleep", str(step_sleep), *train_args).strip().split(";")[0]
        self.dir = root / "runs" / f"job-{self.id}"

    def info(self) -> dict[str, str]:
        return dict(re.findall(r"(\w+)=(\S*)", slurm("scontrol", "show", "job", "-o", self.id)))

    def output(self) -> str:
        return self.out.read_text() if self.out.exists() else ""

    def wait_for(self, pattern: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.output(), re.MULTILINE):
            state = self.info()["JobState"]
            if state in ENDED or time.monotonic() > deadline:
                self.cancel()
                pytest.fail(f"job {self.id} ({state}) never printed {pattern!r} within {timeout:.0f} s:\n"
                            f"{self.output()}")
            time.sleep(0.3)

    def wait_end(self, timeout: float) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while (info := self.info())["JobState"] not in ENDED:
            if time.monotonic() > deadline:
                self.cancel()
                pytest.fail(f"job {self.id} still {info['JobState']} after {timeout:.0f} s:\n{self.output()}")
            time.sleep(0.5)
        return info

    def task_pids(self) -> dict[int, int]:
        """Global rank -> pid of step 0's tasks, as SLURM itself lists them."""
        rows = [line.split() for line in slurm("scontrol", "listpids", self.id).splitlines()[1:]]
        return {int(row[4]): int(row[0]) for row in rows if len(row) == 5 and row[2] == "0" and row[4].isdigit()}

    def cancel(self) -> None:
        subprocess.run(["scancel", self.id], check=False, timeout=30)

    def weights(self) -> dict[str, torch.Tensor]:
        final = self.dir / "final.pt"
        assert final.exists(), f"job {self.id} saved no final weights:\n{self.output()}"
        return torch.load(final, weights_only=True)


def alive(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("slurm")


@pytest.fixture(scope="module")
def reference(root: Path) -> Job:
    """The uninterrupted run every preempted run must equal, bit for bit."""
    job = Job(root, "reference")
    job.wait_end(timeout=300)
    return job


def assert_same_weights(job: Job, reference: Job) -> None:
    mine, theirs = job.weights(), reference.weights()
    assert mine.keys() == theirs.keys()
    for key in mine:
        assert torch.equal(mine[key], theirs[key]), f"{key} differs from the uninterrupted run"


@pytest.mark.timeout(360)
def test_sbatch_two_task_ddp_job_gets_its_ranks_from_slurm(reference: Job) -> None:
    info, out = reference.info(), reference.output()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", out
    for rank in (0, 1):
        assert re.search(rf"^rank {rank}/2 environment=slurm pid=\d+ restart=0 resume=auto$", out, re.MULTILINE), out
    assert f"ckpt_path='auto': no complete checkpoint of run 'slurm-{reference.id}' (from SLURM_JOB_ID)" in out
    assert f"finished at epoch 3 step {TOTAL_STEPS}" in out


@pytest.mark.timeout(420)
def test_usr1_checkpoints_requeues_and_the_job_resumes_bitwise_exactly(root: Path, reference: Job) -> None:
    job = Job(root, "preempted", step_sleep=0.5)
    job.wait_for(r"^step 6$", timeout=180)
    slurm("scancel", "--signal=USR1", job.id)  # to every task of the job's steps, as --signal=USR1@N does
    info = job.wait_end(timeout=300)
    out = job.output()
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", out
    saved = re.search(r"preemption signal \(SLURM.s SIGUSR1 warning\) received; saved .*last\.ckpt at step (\d+)", out)
    assert saved and 6 <= int(saved.group(1)) < TOTAL_STEPS, out
    assert f"SLURM job {job.id} requeued." in out
    assert re.search(r"^rank 0/2 environment=slurm pid=\d+ restart=1 resume=auto$", out, re.MULTILINE), out
    assert re.search(rf"ckpt_path='auto': resuming run 'slurm-{job.id}' .*last\.ckpt", out), out
    resumed = out.split("restart=1", 1)[1]
    assert f"step {int(saved.group(1)) + 1}\n" in resumed and f"step {saved.group(1)}\n" not in resumed, out
    assert_same_weights(job, reference)


@pytest.mark.timeout(420)
def test_signal_before_the_time_limit_checkpoints_and_requeues(root: Path, reference: Job) -> None:
    """``--signal=USR1@60`` with a 2-minute limit: SLURM's own timer warns the tasks (between about 30 and 60 s into
    the run here), the job checkpoints and requeues itself. Each requeued run would be warned again a minute in; to
    keep the test short the limit is raised once the job is back in the queue, and the second run finishes. The
    checkpoints are written in the background (``plugins="async"``): the requeue must wait for them."""
    job = Job(root, "time-limit", "--time=2", "--signal=USR1@60", step_sleep=3.0, train_args=("--async-checkpoints",))
    job.wait_for(rf"SLURM job {job.id} requeued\.", timeout=200)
    slurm("scontrol", "update", f"JobId={job.id}", "TimeLimit=10")
    info = job.wait_end(timeout=200)
    out = job.output()
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", out
    saved = re.search(r"preemption signal \(SLURM.s SIGUSR1 warning\) received; saved .*last\.ckpt at step (\d+)", out)
    assert saved and int(saved.group(1)) < TOTAL_STEPS, out
    assert re.search(r"^rank 0/2 environment=slurm pid=\d+ restart=1 resume=auto$", out, re.MULTILINE), out
    assert_same_weights(job, reference)


@pytest.mark.timeout(420)
def test_usr1_reaching_rank_1_alone_still_requeues(root: Path, reference: Job) -> None:
    """The warning may reach the tasks at different moments, or one task only: the job must still be requeued."""
    job = Job(root, "one-rank", step_sleep=0.5)
    job.wait_for(r"^step 6$", timeout=180)
    pids = job.task_pids()
    os.kill(pids[1], signal.SIGUSR1)
    info = job.wait_end(timeout=300)
    out = job.output()
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", out
    assert "preemption signal (SLURM's SIGUSR1 warning) received" in out and f"SLURM job {job.id} requeued." in out
    assert_same_weights(job, reference)


@pytest.mark.timeout(300)
def test_a_failing_task_ends_the_job_with_1_not_the_preemption_code(root: Path) -> None:
    """143 is what a preempted task exits with (a RequeueExit=143 policy requeues it): a failure must not look so,
    though srun sends SIGTERM to the failed task while it is still tearing down."""
    job = Job(root, "fails", step_sleep=0.2, train_args=("--fail-at", "4"))
    info = job.wait_end(timeout=240)
    out = job.output()
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "1:0", (info, out)
    assert "rank 1 fails on purpose at step 4" in out and "rank 1 failed; stopping rank 0" in out, out


@pytest.mark.timeout(300)
def test_killing_one_task_ends_every_task_of_the_job(root: Path) -> None:
    job = Job(root, "killed", step_sleep=0.5)
    job.wait_for(r"^step 3$", timeout=180)
    pids = job.task_pids()
    assert sorted(pids) == [0, 1], pids
    assert pids[1] == int((job.dir / "pids" / "rank1").read_text()), "SLURM's pid for rank 1 is the training process"
    os.kill(pids[1], 9)
    killed = time.monotonic()
    while any(alive(pid) for pid in pids.values()) and time.monotonic() - killed < 15:
        time.sleep(0.1)
    gone_after = time.monotonic() - killed
    assert not any(alive(pid) for pid in pids.values()), f"tasks still alive 15 s after the kill:\n{job.output()}"
    info = job.wait_end(timeout=60)
    assert info["JobState"] in {"FAILED", "CANCELLED"}, (info["JobState"], job.output())
    assert "task 1: Killed" in job.output()
    print(f"every task gone {gone_after:.1f} s after rank 1 was killed; job {info['JobState']}")
