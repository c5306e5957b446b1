"""A private one-node SLURM cluster on this machine, for the tests (``nox -s slurm``) or by hand.

    python tools/slurm_cluster.py start DIR     # installs slurm-wlm + munge if missing, starts munged, slurmctld, slurmd
    python tools/slurm_cluster.py stop DIR      # cancels the jobs, ends every process of the cluster, even on failure
    eval "$(python tools/slurm_cluster.py env DIR)"   # then sbatch / squeue / sinfo talk to this cluster

Everything lives under DIR: the munge key and socket, slurm.conf, the controller state, the spool and the logs. The
two SLURM ports are free ports picked at start, so the cluster collides with nothing else on the machine. It runs in a
container without systemd or usable cgroups: ``proctrack/linuxproc`` follows the job processes through their parent
ids and ``task/none`` binds nothing. Every daemon is started with ``SLURM_CONF`` pointing into DIR, and so is every job
process (sbatch exports the submitting environment); ``stop`` ends exactly the processes whose environment holds that
value, by pid, so nothing of another cluster or user is touched.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["cluster_env", "ensure_installed", "processes", "start", "stop"]

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "sinfo", "squeue", "scancel")
# The Debian packages behind PROGRAMS (slurm-wlm is their meta-package and brings nothing more that is needed here).
PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client")


def ensure_installed() -> None:
    """apt-get install the SLURM daemons, client and munge when one of PROGRAMS is missing (needs root)."""
    missing = [p for p in PROGRAMS if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]
    if not missing:
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        sys.exit(f"slurm_cluster: {', '.join(missing)} missing; install {' '.join(PACKAGES)} (needs root and apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]
    if subprocess.run(install, env=env, check=False).returncode:
        subprocess.run(["apt-get", "update"], env=env, check=True)
        subprocess.run(install, env=env, check=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpus() -> int:
    """What slurmd itself reports for this host (``slurmd -C``), at most 2 and at least 1."""
    out = subprocess.run([_sbin("slurmd"), "-C"], capture_output=True, text=True, check=False).stdout
    for field in out.split():
        if field.startswith("CPUs="):
            return max(1, min(2, int(field.split("=", 1)[1])))
    return max(1, min(2, os.cpu_count() or 1))


def _sbin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def cluster_env(root: Path) -> dict[str, str]:
    """The variables that make the SLURM commands (and every job) use this cluster."""
    return {"SLURM_CONF": str(root / "slurm.conf")}


def _write_config(root: Path, host: str) -> None:
    for sub in ("state", "spool", "log", "munge"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "plugstack.conf").write_text("")
    lines = {
        "ClusterName": "xtraintest",
        "SlurmctldHost": f"{host}(127.0.0.1)",  # no name lookup needed
        "SlurmctldPort": _free_port(),
        "SlurmdPort": _free_port(),
        "SlurmUser": "root",
        "SlurmdUser": "root",
        "AuthType": "auth/munge",
        "CredType": "cred/munge",
        # cred_expire is also how long a requeued job waits before it may start again (120 s by default).
        "AuthInfo": f"socket={root / 'munge' / 'munge.socket'},cred_expire=10",
        "ProctrackType": "proctrack/linuxproc",
        "TaskPlugin": "task/none",
        "JobAcctGatherType": "jobacct_gather/none",
        "AccountingStorageType": "accounting_storage/none",
        "JobCompType": "jobcomp/none",
        "SwitchType": "switch/none",
        "MpiDefault": "none",
        "SchedulerType": "sched/backfill",
        "SchedulerParameters": "sched_interval=2,bf_interval=2",  # a requeued job starts again within seconds
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core",
        "JobRequeue": 1,
        "ReturnToService": 2,
        "MinJobAge": 3600,  # finished jobs stay visible to scontrol (there is no accounting database for sacct)
        "KillWait": 5,
        "InactiveLimit": 0,
        "StateSaveLocation": root / "state",
        "SlurmdSpoolDir": root / "spool",
        "SlurmctldPidFile": root / "slurmctld.pid",
        "SlurmdPidFile": root / "slurmd.pid",
        "SlurmctldLogFile": root / "log" / "slurmctld.log",
        "SlurmdLogFile": root / "log" / "slurmd.log",
        "SlurmctldDebug": "info",
        "SlurmdDebug": "info",
        "PlugStackConfig": root / "plugstack.conf",
    }
    text = "".join(f"{key}={value}\n" for key, value in lines.items())
    text += f"NodeName={host} NodeAddr=127.0.0.1 CPUs={_cpus()} State=UNKNOWN\n"
    text += "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
    (root / "slurm.conf").write_text(text)


def _start_munge(root: Path) -> None:
    munge = root / "munge"
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munge.chmod(0o700)
    subprocess.run([_sbin("munged"), "--force", f"--key-file={key}", f"--socket={munge / 'munge.socket'}",
                    f"--pid-file={munge / 'munged.pid'}", f"--log-file={root / 'log' / 'munged.log'}",
                    f"--seed-file={munge / 'munged.seed'}"], check=True, env=_daemon_env(root))


def _daemon_env(root: Path) -> dict[str, str]:
    return {**os.environ, **cluster_env(root)}


def _wait_idle(root: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, check=False,
                               env=_daemon_env(root)).stdout.strip()
        if state == "idle":
            return
        time.sleep(0.5)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((root / "log").glob("*.log")))
    raise RuntimeError(f"slurm_cluster: the node is {state or 'not reported'!r}, not idle, after {timeout:.0f} s\n{logs}")


def start(root: Path, *, install: bool = True, timeout: float = 90.0) -> dict[str, str]:
    """Start munged, slurmctld and slurmd under ``root``; return the environment the SLURM commands need."""
    if install:
        ensure_installed()
    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname().split(".")[0]
    _write_config(root, host)
    _start_munge(root)
    env = _daemon_env(root)
    conf = str(root / "slurm.conf")
    subprocess.run([_sbin("slurmctld"), "-c", "-f", conf], check=True, env=env)
    subprocess.run([_sbin("slurmd"), "-f", conf, "-N", host], check=True, env=env)
    _wait_idle(root, timeout)
    return cluster_env(root)


def processes(root: Path) -> list[int]:
    """Pids of every process of this cluster: the daemons, slurmstepd and the job tasks (by their SLURM_CONF)."""
    marker = f"SLURM_CONF={root.resolve() / 'slurm.conf'}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    munged = root / "munge" / "munged.pid"
    if munged.exists():
        found.append(int(munged.read_text().strip() or 0))
    return [pid for pid in found if pid > 0]


def stop(root: Path, *, grace: float = 10.0) -> list[int]:
    """Cancel every job, then end every process of the cluster (SIGTERM, SIGKILL after ``grace``); return the pids
    that had to be killed. Safe to call when nothing (or only part) is running."""
    root = root.resolve()
    env = _daemon_env(root)
    if (root / "slurm.conf").exists() and shutil.which("scancel"):
        subprocess.run(["scancel", "--full", "--user=root"], env=env, check=False, capture_output=True, timeout=30)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            queue = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%T"], env=env, capture_output=True, text=True,
                                   check=False, timeout=30)
            if queue.returncode or not {"RUNNING", "COMPLETING", "CONFIGURING"} & set(queue.stdout.split()):
                break
            time.sleep(0.5)
    pids = processes(root)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.2)
    killed = [pid for pid in pids if _alive(pid)]
    for pid in killed:
        _signal(pid, signal.SIGKILL)
    return killed


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "stop", "env", "status"])
    parser.add_argument("dir", type=Path, help="where the cluster keeps its key, config, state and logs")
    parser.add_argument("--no-install", action="store_true", help="never apt-get install the missing programs")
    args = parser.parse_args()
    root = args.dir.resolve()
    if args.action == "start":
        try:
            env = start(root, install=not args.no_install)
        except BaseException:
            stop(root)
            raise
        print(f"slurm_cluster: up ({root}); use it with: export " + " ".join(f"{k}={v}" for k, v in env.items()))
    elif args.action == "stop":
        killed = stop(root)
        print(f"slurm_cluster: stopped ({root})" + (f"; SIGKILLed {killed}" if killed else ""))
    elif args.action == "env":
        print(" ".join(f"export {k}={v}" for k, v in cluster_env(root).items()))
    else:
        sys.exit(subprocess.run(["sinfo", "-N", "-l"], env=_daemon_env(root), check=False).returncode)


if __name__ == "__main__":
    main()
