"""Starting processes the way users do (a script, torchrun, mpirun), with a hard timeout, for tests.

Every multi-process test goes through :func:`run_processes`. Each command runs in its own session; on timeout the
whole session is killed, so a hung run can never hang the test suite. Every process started (including ranks and
dataloader workers) inherits a marker variable, so :func:`leftover_processes` can prove none outlived the run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

__all__ = ["ProcessResult", "RunResult", "free_port", "leftover_processes", "python_command", "run_processes",
           "torchrun_command"]

_MARKER = "XTRAIN_TEST_RUN_ID"


def free_port() -> int:
    """A TCP port free on this host now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ProcessResult:
    """One started command: its exit code (``None`` if it was killed at the timeout) and its output."""

    command: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@dataclass(frozen=True)
class RunResult:
    """All commands of one run."""

    processes: list[ProcessResult]
    timed_out: bool
    elapsed: float
    run_id: str = field(repr=False)

    @property
    def returncodes(self) -> list[int | None]:
        return [p.returncode for p in self.processes]

    @property
    def output(self) -> str:
        return "\n".join(p.output for p in self.processes)

    def check(self) -> RunResult:
        """Raise with all the output if any command failed or the run timed out."""
        if self.timed_out or any(code != 0 for code in self.returncodes):
            raise AssertionError(f"run failed (timed out: {self.timed_out}, exit codes {self.returncodes}):\n"
                                 f"{self.output}")
        return self


def python_command(*args: str) -> list[str]:
    """``[sys.executable, *args]``."""
    return [sys.executable, *args]


def torchrun_command(*args: str, nproc_per_node: int, nnodes: int = 1, node_rank: int = 0,
                     master_port: int | None = None, rdzv_endpoint: str | None = None) -> list[str]:
    """A ``python -m torch.distributed.run`` command (what ``torchrun`` runs)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc_per_node}",
           f"--nnodes={nnodes}", "--max-restarts=0"]
    if nnodes > 1:
        cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint or f'127.0.0.1:{master_port or free_port()}'}",
                "--rdzv-id=xtrain-test"]
    else:
        cmd += ["--master-addr=127.0.0.1", f"--master-port={master_port or free_port()}"]
    return [*cmd, *args]


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_processes(commands: Sequence[Sequence[str]], *, timeout: float, envs: Sequence[Mapping[str, str]] | None = None,
                  cwd: str | os.PathLike[str] | None = None, stagger: float = 0.0) -> RunResult:
    """Start ``commands`` together and wait for all of them, at most ``timeout`` seconds.

    Args:
        commands: The commands; each becomes the leader of its own session.
        timeout: Hard limit for the whole run; on expiry every session is killed with SIGKILL.
        envs: Extra environment variables per command (merged into ``os.environ``).
        cwd: Working directory.
        stagger: Seconds to wait between starting commands.
    """
    run_id = uuid.uuid4().hex
    procs: list[tuple[subprocess.Popen[bytes], IO[bytes], IO[bytes]]] = []
    start = time.monotonic()
    for i, cmd in enumerate(commands):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", _MARKER: run_id, **(envs[i] if envs else {})}
        out = tempfile.TemporaryFile()  # noqa: SIM115 - closed after the run
        err = tempfile.TemporaryFile()  # noqa: SIM115 - closed after the run
        proc = subprocess.Popen(list(cmd), env=env, cwd=cwd, stdout=out, stderr=err, start_new_session=True)
        procs.append((proc, out, err))
        if stagger:
            time.sleep(stagger)
    timed_out = False
    for proc, _, _ in procs:
        remaining = timeout - (time.monotonic() - start)
        try:
            proc.wait(timeout=max(remaining, 0.01))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for proc, _, _ in procs:
            _kill_session(proc)
        for proc, _, _ in procs:
            proc.wait()
    results = []
    for proc, stdout_file, stderr_file in procs:
        stdout_file.seek(0)
        stderr_file.seek(0)
        code = None if timed_out and proc.returncode == -signal.SIGKILL else proc.returncode
        results.append(ProcessResult(tuple(proc.args), code,  # type: ignore[arg-type]
                                     stdout_file.read().decode(errors="replace"),
                                     stderr_file.read().decode(errors="replace")))
        stdout_file.close()
        stderr_file.close()
    return RunResult(results, timed_out, time.monotonic() - start, run_id)


def leftover_processes(result: RunResult) -> list[int]:
    """PIDs of processes from ``result``'s run that are still alive (read from ``/proc``; empty elsewhere)."""
    marker = f"{_MARKER}={result.run_id}".encode()
    alive = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                status = (entry / "stat").read_text().split()
                if status[2] != "Z":
                    alive.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return alive
