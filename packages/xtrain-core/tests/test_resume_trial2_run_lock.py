"""The run lock belongs to the process that took it, not to the DataLoader workers it forked.

After a SIGKILL of the trainer, its orphaned worker kept the ``flock`` (shared with its open file) until it noticed
the parent was gone, seconds later, and an immediate restart with ``ckpt_path="auto"`` was refused.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from xtrain.core._internal.run_lock import RunLock
from xtrain.core.errors import ConfigError

_TRAIN = textwrap.dedent("""
    import sys, time, torch
    from torch.utils.data import DataLoader, TensorDataset
    from xtrain.core import Trainer, TrainModule

    class Net(TrainModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)
        def forward(self, x):
            return self.lin(x)
        def training_step(self, batch, batch_idx):
            time.sleep(float(sys.argv[2]))
            return self(batch[0]).pow(2).mean()
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4, num_workers=1)
    Trainer(default_root_dir=sys.argv[1], max_epochs=2, run_name="job", logger=False, enable_progress_bar=False,
            enable_model_summary=False).fit(Net(), loader, ckpt_path="auto")
    print("DONE", flush=True)
""")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table from /proc")
def test_a_restart_right_after_sigkill_takes_the_lock_while_a_worker_lives_on(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(_TRAIN)
    root = tmp_path / "root"
    first = subprocess.Popen([sys.executable, str(script), str(root), "0.05"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (root / "checkpoints" / "last.ckpt").exists():  # the first epoch is saved
            assert first.poll() is None, first.communicate(timeout=30)[1][-2000:]
            assert time.monotonic() < deadline, "the first job saved nothing"
            time.sleep(0.05)
        time.sleep(0.3)  # in the second epoch, its worker busy
        workers = _children(first.pid)
        assert workers, "the first job has no DataLoader worker"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    orphans = [w for w in workers if Path(f"/proc/{w}").exists()]
    assert orphans, "the worker ended with the trainer: nothing to test"  # it lingers ~5 s (its parent check)
    try:
        restart = subprocess.run([sys.executable, str(script), str(root), "0"], capture_output=True, text=True,
                                 timeout=180)
        assert restart.returncode == 0 and "DONE" in restart.stdout, restart.stderr[-3000:]
    finally:
        for worker in orphans:
            try:
                os.kill(worker, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_forked_child_does_not_keep_the_lock(tmp_path: Path) -> None:
    lock = RunLock()
    lock.acquire(tmp_path, "run")
    ready, started = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child only sleeps, holding whatever it inherited
        os.write(started, b"x")  # os.fork's after-fork hooks have run in the child by now
        time.sleep(20)
        os._exit(0)
    try:
        os.read(ready, 1)  # a loaded machine may not have run the child yet: it would still hold the inherited file
        lock.release()
        probe = subprocess.run([sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1], 'a+'); "
                                "fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)",
                                str(tmp_path / ".xtrain-run.lock")], capture_output=True, text=True, timeout=60)
        assert probe.returncode == 0, probe.stderr[-2000:]
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(ready)
        os.close(started)


def test_a_lock_held_after_its_taker_ended_is_not_called_another_job(tmp_path: Path) -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           timeout=60)
    dead = int(ended.stdout)
    import socket

    lock_file = tmp_path / ".xtrain-run.lock"
    lock_file.write_text(f"pid {dead} on {socket.gethostname()} since 2024-01-01 00:00:00")
    holder = open(lock_file, "a+")  # noqa: SIM115 - stands for the orphan that still has the file open
    try:
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ConfigError, match=rf"run_name='run': is locked .*the job that took the lock \(pid {dead} "
                                              r"on .*\) has ended: a process it started") as caught:
            RunLock().acquire(tmp_path, "run")
        assert "another job right now" not in str(caught.value)
    finally:
        holder.close()
