"""The default DDP launcher: the calling process is local rank 0 and re-executes its own command for the others.

Re-executing (rather than spawning) means nothing has to be pickled and the user's script needs no
``if __name__ == "__main__"`` guard; every rank runs the same code from the top, as under ``torchrun``.

The parent watches its children from a thread. When a child exits with an error (or is killed), the parent kills
the remaining children, says which rank failed and exits with that rank's code, so a run never waits for a
collective timeout on this node. Children are tied to the parent with ``PR_SET_PDEATHSIG``, so killing the parent
kills them too. Across nodes, the fail-fast watchdog of :class:`~xtrain.core.parallel.ParallelStrategy` does the
same through the rendezvous store.

With ``max_restarts`` (``Trainer(max_restarts=N)``) the caller instead supervises every local rank and restarts
the group after a failure (:mod:`xtrain.strategies._internal.supervisor`).
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from typing_extensions import override

from xtrain.core._internal.error_chain import in_chain
from xtrain.core.environment import ClusterEnvironment
from xtrain.core.errors import ConfigError, SIGTERMException
from xtrain.core.launcher import Launcher
from xtrain.strategies._internal.pdeathsig import preexec_die_with_parent

__all__ = ["SubprocessScriptLauncher", "reexec_command"]

_POLL_S = 0.1
_SIGTERM_STOP = SIGTERMException.exit_code
_SIGINT_STOP = 128 + signal.SIGINT  # the shell's code for a job ended by Ctrl-C
_CAUSE_WINDOW_S = 1.0
# Words of the errors a collective raises when another rank is gone (gloo, NCCL, MPI, Horovod's "has been shut
# down ... on one of the ranks"); a false match only costs the wait.
_PEER_WORDS = ("connection", "gloo", "nccl", "mpi", "horovod", "shut down", "rank", "process group", "collective",
               "broken pipe", "peer", "socket", "closed", "reset", "abort", "timed out", "timeout")


def reexec_command(*, strategy: str = "ddp") -> list[str]:
    """The command that started this process, rebuilt so a child process runs the same thing.

    Handles ``python script.py``, ``python -m package`` and console scripts (which run as a file), and keeps
    interpreter options such as ``-O`` or ``-X dev``. The script path is made absolute.

    Raises:
        ConfigError: When the code did not come from a file or module (``python -c``, standard input).
    """
    argv = list(sys.argv)
    orig = list(getattr(sys, "orig_argv", []))
    tail = len(argv) - 1
    options: list[str] = []
    if orig and (tail == 0 or orig[-tail:] == argv[1:]):
        options = orig[1:len(orig) - len(argv)]
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name not in ("__main__", ""):
        if options and options[-1] == "-m":
            options = options[:-1]
        return [sys.executable, *options, "-m", spec.name.removesuffix(".__main__"), *argv[1:]]
    script = argv[0] if argv else ""
    if script in ("", "-", "-c") or not os.path.isfile(script):
        spawn = ", or use strategy='ddp_spawn'" if strategy == "ddp" else ""
        raise ConfigError("strategy", strategy, f"starts the other ranks by re-running this process's command, but "
                          f"the code did not come from a script or module (sys.argv[0]={script!r}).",
                          fix=f"put the code in a file and run `python file.py`{spawn}.")
    return [sys.executable, *options, os.path.abspath(script), *argv[1:]]


class SubprocessScriptLauncher(Launcher):
    """Starts local ranks ``1..num_processes-1`` as copies of the current command; the caller is local rank 0.

    Args:
        num_processes: Processes on this node (one per device).
        num_nodes: Number of nodes.
        environment: Where the node rank and the rendezvous address come from.
        strategy: The name of the strategy that launches (for its messages).
    """

    interactive_compatible: ClassVar[bool] = False
    runs_in_caller: ClassVar[bool] = True
    supports_restarts: ClassVar[bool] = True

    def __init__(self, *, num_processes: int, num_nodes: int, environment: ClusterEnvironment,
                 strategy: str = "ddp") -> None:
        self.num_processes = num_processes
        self.num_nodes = num_nodes
        self.environment = environment
        self.strategy_name = strategy
        self.procs: list[subprocess.Popen[bytes]] = []
        self.launched = False
        self._caller_failed = False
        self._waited = False  # caller_failed waited for a child's exit code already
        self._watcher: threading.Thread | None = None

    @override
    def check(self) -> None:
        if self.num_processes > 1 and not self.environment.creates_processes_externally:
            reexec_command(strategy=self.strategy_name)

    @override
    def launch(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self.launched and not self.environment.creates_processes_externally:
            if self.max_restarts:
                self._supervise()
            self._start_children()
        self.launched = True
        return fn(*args, **kwargs)

    def caller_failed(self, error: BaseException | None = None) -> None:
        """Rank 0 (this process) raised ``error`` (told by the strategy's ``on_exception``, then by the
        uncaught-exception hook).

        If a child died first (rank 0's collective then fails with "connection closed"), the child is the cause:
        report it and exit with its code. Otherwise rank 0's own traceback is the one to show, so the watcher
        stays quiet and the children are ended at exit. Only an error a peer's death can cause (a failed
        collective) waits for a child's exit code, once; rank 0's own error (a bug in its step) ends the job at once.
        Ctrl-C reaches every rank, which end their own run and say so: it waits each time, for their report.
        """
        if isinstance(error, KeyboardInterrupt):
            window = _CAUSE_WINDOW_S
        elif self._waited or not (error is None or _may_be_a_peers_death(error)):
            window = 0.0
        else:
            window, self._waited = _CAUSE_WINDOW_S, True
        deadline = time.monotonic() + window
        while self.procs and time.monotonic() < deadline:
            for index, proc in enumerate(self.procs, start=1):
                code = proc.poll()
                if code not in (None, 0):
                    assert code is not None
                    self._fail(self.environment.node_rank(), index, proc, code)
            time.sleep(_POLL_S)
        self._caller_failed = True

    def _start_children(self) -> None:
        env = self.environment
        node_rank = env.node_rank()
        variables = {"MASTER_ADDR": env.main_address, "MASTER_PORT": str(env.main_port),
                     "NODE_RANK": str(node_rank), "WORLD_SIZE": str(self.num_processes * self.num_nodes),
                     "LOCAL_WORLD_SIZE": str(self.num_processes), "XTRAIN_LAUNCHER_PID": str(os.getpid())}
        os.environ.update(variables)
        if self.num_processes > 1:
            command = reexec_command(strategy=self.strategy_name)
            preexec = preexec_die_with_parent()
            for local_rank in range(1, self.num_processes):
                child_env = {**os.environ, **self._child_environment(local_rank)}
                self.procs.append(subprocess.Popen(command, env=child_env, preexec_fn=preexec))
            self._watcher = threading.Thread(target=self._watch, args=(node_rank,), name="xtrain-child-watcher",
                                             daemon=True)
            self._watcher.start()
            atexit.register(self._wait_for_children)
            _chain_excepthook(self)
        # From now on this process is local rank 0 of processes that exist: a second fit, or another Trainer in
        # this script, must not start more.
        os.environ["LOCAL_RANK"] = "0"

    def _supervise(self) -> None:
        """Start every local rank as a child and restart the group after failures; never returns."""
        if self.num_nodes > 1:
            raise ConfigError("max_restarts", self.max_restarts, "restarts the ranks of one node, but this run has "
                              f"num_nodes={self.num_nodes}.", fix="on several nodes restart with `torchrun "
                              "--max-restarts=N` or SLURM requeue (and ckpt_path='auto'), and leave max_restarts=0.")
        from xtrain.core.defaults.local import find_free_port
        from xtrain.strategies._internal.supervisor import supervise

        env = self.environment
        node_rank = env.node_rank()
        base = {**os.environ, "MASTER_ADDR": env.main_address, "MASTER_PORT": str(env.main_port),
                "NODE_RANK": str(node_rank), "WORLD_SIZE": str(self.num_processes * self.num_nodes),
                "LOCAL_WORLD_SIZE": str(self.num_processes), "XTRAIN_LAUNCHER_PID": str(os.getpid())}
        supervise(command=reexec_command(strategy=self.strategy_name), num_processes=self.num_processes,
                  max_restarts=self.max_restarts, run_name=self.run_name,
                  base_env=base, child_env=self._child_environment,
                  global_rank=lambda local: self._global_rank(node_rank, local), new_port=find_free_port)

    def _child_environment(self, local_rank: int) -> dict[str, str]:
        """Variables that differ between the children (subclasses add their launcher's own)."""
        return {"LOCAL_RANK": str(local_rank)}

    def _global_rank(self, node_rank: int, local_rank: int) -> int:
        return node_rank * self.num_processes + local_rank

    def _watch(self, node_rank: int) -> None:
        while True:
            running = 0
            for index, proc in enumerate(self.procs, start=1):
                code = proc.poll()
                if code is None:
                    running += 1
                elif code not in (0, _SIGTERM_STOP):  # 143: the SIGTERM stop every rank makes together
                    self._fail(node_rank, index, proc, code)
                    return
            if not running:
                return
            threading.Event().wait(_POLL_S)

    def _fail(self, node_rank: int, local_rank: int, proc: subprocess.Popen[bytes], code: int) -> None:
        self._kill_children()
        if self._caller_failed:
            return
        rank = self._global_rank(node_rank, local_rank)
        if code in (-signal.SIGINT, _SIGINT_STOP):  # Ctrl-C: the job was interrupted, no rank failed
            sys.stderr.write(f"\nxtrain: rank {rank} (local rank {local_rank}, pid {proc.pid}) was interrupted "
                             f"(SIGINT, Ctrl-C); stopped the other ranks on this node.\n")
            sys.stderr.flush()
            os._exit(_SIGINT_STOP)
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        sys.stderr.write(f"\nxtrain: rank {rank} (local rank {local_rank}, pid {proc.pid}) {how}; stopped the "
                         f"other ranks on this node. Its traceback, if it had one, is above.\n")
        sys.stderr.flush()
        os._exit(128 - code if code < 0 else code)

    def _kill_children(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    proc.kill()
                except OSError:
                    pass

    def _wait_for_children(self) -> None:
        """At interpreter exit: let the children finish (the watcher still reports failures), or end them."""
        if self._caller_failed:
            self._kill_children()
        for proc in self.procs:
            proc.wait()
        if self._watcher is not None:
            self._watcher.join(timeout=1.0)


def _may_be_a_peers_death(error: BaseException) -> bool:
    """Whether ``error`` is what a collective raises when another rank's process is gone (torch's distributed
    errors, gloo's or NCCL's "connection closed"), as opposed to rank 0's own failure."""
    import torch.distributed as dist

    def gone(seen: BaseException) -> bool:
        return (isinstance(seen, (dist.DistError, ConnectionError, TimeoutError))
                or any(word in str(seen).lower() for word in _PEER_WORDS))

    return in_chain(error, gone)


def _chain_excepthook(launcher: SubprocessScriptLauncher) -> None:
    """An uncaught exception in rank 0 ends its children at exit instead of waiting for them."""
    previous = sys.excepthook

    def hook(*exc_info: Any) -> None:
        launcher.caller_failed(exc_info[1])
        previous(*exc_info)
        if not isinstance(exc_info[1], KeyboardInterrupt):  # Ctrl-C: the ranks' interruption reports come meanwhile
            # The interpreter's last garbage collection walks every object torch and the run made (about a second
            # here) while the job's exit code waits; a failed run's cyclic garbage needs no collecting on the way out.
            gc.freeze()

    sys.excepthook = hook
