"""Spawn and fork launchers: the calling process starts every local rank and waits for them.

The caller does not train. Global rank 0 returns the finished run's full state (weights, optimizer and scheduler
state, loop progress, callback state, metrics), which the Trainer loads into the caller's objects, so a second
``fit`` on the same Trainer continues where the first stopped.

The work is handed to spawned processes as one standard pickle, not through ``torch.multiprocessing``'s shared
memory: shared parameter storage would make every rank (and the caller) update the same tensors. Rank 0's result
comes back through a file in a private temporary directory, so a large state cannot block on a pipe.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import pickle
import signal
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException, start_processes
from typing_extensions import override

from xtrain.core.defaults.local import find_free_port
from xtrain.core.environment import ClusterEnvironment
from xtrain.core.errors import CheckpointError, ConfigError, RankFailedError, SIGTERMException
from xtrain.core.launcher import Launcher
from xtrain.strategies._internal.global_state import GlobalState
from xtrain.strategies._internal.pdeathsig import die_with_parent

__all__ = ["ForkLauncher", "MultiprocessingLauncher"]

_GRACE_S = 3.0
_PORT_TRIES = 3  # launches tried when the chosen rendezvous port was taken meanwhile
_RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")



class MultiprocessingLauncher(Launcher):
    """Starts every local rank with ``torch.multiprocessing.start_processes`` (``spawn`` by default).

    Args:
        num_processes: Processes on this node.
        num_nodes: Number of nodes (each node's caller starts its own ranks).
        environment: Where the node rank and the rendezvous address come from.
        start_method: ``"spawn"`` or ``"forkserver"`` (``"fork"``: use :class:`ForkLauncher`).
    """

    interactive_compatible: ClassVar[bool] = False
    runs_in_caller: ClassVar[bool] = False
    start_method: str = "spawn"

    def __init__(self, *, num_processes: int, num_nodes: int, environment: ClusterEnvironment,
                 start_method: Literal["spawn", "forkserver"] | None = None) -> None:
        self.num_processes = num_processes
        self.num_nodes = num_nodes
        self.environment = environment
        if start_method is not None:
            self.start_method = start_method
        self._user_port = "MASTER_PORT" in os.environ

    @override
    def check(self) -> None:
        if self.start_method not in multiprocessing.get_all_start_methods():
            raise ConfigError("strategy", f"start method {self.start_method!r}", "is not available on this platform "
                              f"(it offers {multiprocessing.get_all_start_methods()}).",
                              choices=multiprocessing.get_all_start_methods(),
                              fix="use strategy='ddp_spawn' (works everywhere), or strategy='ddp' from a script.")

    @override
    def launch(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.check()
        saved = {key: os.environ.get(key) for key in _RENDEZVOUS}
        try:  # the ranks inherit the rendezvous; the caller's environment is left as it was (a later Trainer
            return self._launch(fn, args, kwargs)  # must not take an old port for the user's own)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def _launch(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        for attempt in range(_PORT_TRIES):
            try:
                return self._launch_once(fn, args, kwargs)
            except _PortTaken as taken:
                # The free port we chose was taken by another process before rank 0 listened on it (nothing ran
                # yet): choose another. A port the user set is theirs to change.
                if self._user_port or attempt == _PORT_TRIES - 1:
                    raise taken.error from None
        raise AssertionError("unreachable")

    def _launch_once(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        env = self.environment
        if not self._user_port:
            os.environ["MASTER_PORT"] = str(find_free_port())  # a fresh rendezvous for every launch
        node_rank = env.node_rank()
        os.environ.update({"MASTER_ADDR": env.main_address, "MASTER_PORT": str(env.main_port),
                           "NODE_RANK": str(node_rank), "WORLD_SIZE": str(self.num_processes * self.num_nodes),
                           "LOCAL_WORLD_SIZE": str(self.num_processes)})
        with tempfile.TemporaryDirectory(prefix="xtrain-launch-") as tmp:
            result_path = Path(tmp) / "result.pt"
            work = self._package(fn, args, kwargs)
            context = start_processes(_worker, args=(work, str(result_path), os.getpid()),
                                         nprocs=self.num_processes, join=False, start_method=self.start_method)
            try:
                try:
                    while not context.join(grace_period=_GRACE_S):
                        pass
                except BaseException:
                    _stop(context.processes)  # Ctrl-C in a notebook reaches the caller only: end the ranks too
                    raise
            except ProcessRaisedException as err:
                rank = node_rank * self.num_processes + err.error_index
                kept = self._kept(result_path, err.error_index)
                if kept is not None:  # the same ConfigError/CheckpointError as in one process: except clauses work
                    raise kept from None
                failed = RankFailedError(rank, str(err).strip())
                if "EADDRINUSE" in str(err) and "TCPStore" in str(err):
                    raise _PortTaken(failed) from None
                raise failed from None
            except ProcessExitedException as err:
                if err.exit_code == SIGTERMException.exit_code:  # the ranks saved and stopped on SIGTERM: so does fit
                    raise SIGTERMException from None
                kept = self._kept(result_path, err.error_index)
                if kept is not None:  # one rank refused (a restore), and the others were stopped
                    raise kept from None
                # A rank stopped by the watchdog may be seen first; a rank that raised left its traceback in its
                # error file, and that rank is the cause.
                raised = _raised(context.error_files)
                if raised is not None:
                    raise RankFailedError(node_rank * self.num_processes + raised[0], raised[1]) from None
                rank = node_rank * self.num_processes + err.error_index
                raise RankFailedError(rank, f"rank {rank} (pid {err.error_pid}) {_how(err.exit_code)}; the other ranks "
                                      f"were stopped.") from None
            if not result_path.exists():
                return None
            return torch.load(result_path, weights_only=False)  # our own file, written by rank 0 just now

    def _kept(self, result_path: Path, first: int) -> ConfigError | CheckpointError | None:
        """The ConfigError/CheckpointError a local rank left, ``first``'s before the others': the rank that raised it
        need not be the first seen to fail (one rank refuses a restore, the others are stopped waiting for it)."""
        for rank in (first, *(i for i in range(self.num_processes) if i != first)):
            kept = _kept_error(_error_path(result_path, rank))
            if kept is not None:
                return kept
        return None

    def _package(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # A plain pickle copies tensors; torch.multiprocessing would share their memory between all ranks.
        return pickle.dumps((GlobalState.capture(), fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)


class ForkLauncher(MultiprocessingLauncher):
    """Forks every local rank: works in notebooks and REPLs, where there is no script to re-run or import."""

    interactive_compatible: ClassVar[bool] = True
    start_method: str = "fork"

    @override
    def launch(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            raise ConfigError("strategy", "ddp_fork", "cannot fork: CUDA was already initialized in this process, "
                              "and a forked child cannot use it.",
                              fix="do not touch CUDA before fit (no .cuda(), no torch.cuda calls), or use "
                                  "strategy='ddp_spawn' or a script with strategy='ddp'.")
        # torch imports its compiler stack (seconds) when the first optimizer is created: once here, the ranks
        # inherit it instead of each importing it, and this process again when their results come back.
        importlib.import_module("torch._dynamo")
        return super().launch(fn, *args, **kwargs)

    @override
    def _package(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return (fn, args, kwargs)  # a forked child has its own copy-on-write memory already


def _worker(local_rank: int, work: Any, result_path: str, parent_pid: int) -> None:
    die_with_parent(parent_pid)
    os.environ["LOCAL_RANK"] = str(local_rank)
    if isinstance(work, bytes):
        state, fn, args, kwargs = pickle.loads(work)
        state.apply()
    else:
        # A forked child inherits OpenMP's thread-pool bookkeeping but not its threads: the first parallel CPU op
        # would wait for them forever. One intra-op thread per rank never enters the pool.
        torch.set_num_threads(1)
        fn, args, kwargs = work
    try:
        result = fn(*args, **kwargs)
    except (ConfigError, CheckpointError) as err:  # raised before training or by a restore, alike on every rank
        _keep_error(err, _error_path(Path(result_path), local_rank))
        raise
    except KeyboardInterrupt as err:
        # torch's spawn wrapper takes an interrupted rank for one its caller stopped and exits 0, which would read
        # as a finished run; as an error, its traceback reaches the caller (the Trainer here has already ended the
        # run: on_exception, loggers).
        raise RankInterrupted(f"rank {os.environ.get('RANK', local_rank)} was interrupted (KeyboardInterrupt: a "
                              f"callback raised it or the process got SIGINT)") from err
    if result is not None and local_rank == 0:  # every rank may return a value: the caller gets its rank 0's
        tmp = f"{result_path}.tmp"
        torch.save(result, tmp)
        os.replace(tmp, result_path)


def _error_path(result_path: Path, local_rank: int) -> Path:
    return result_path.with_name(f"error{local_rank}.json")


_KEPT: dict[str, type[ConfigError] | type[CheckpointError]] = {"ConfigError": ConfigError,
                                                                "CheckpointError": CheckpointError}


def _keep_error(err: ConfigError | CheckpointError, path: Path) -> None:
    """Leave the exception's class and message for the caller to raise again (its traceback text alone would reach
    it). Plain JSON: nothing read back can run code."""
    with suppress(OSError):
        kind = "ConfigError" if isinstance(err, ConfigError) else "CheckpointError"
        path.write_text(json.dumps({"kind": kind, "message": str(err)}))


def _kept_error(path: Path) -> ConfigError | CheckpointError | None:
    """The exception a rank left in the launch's own temporary folder, rebuilt from its class and message."""
    try:
        kept = json.loads(path.read_text())
        kind = _KEPT[str(kept["kind"])]
        return kind(str(kept["message"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none left (the rank failed otherwise): the traceback text then


class RankInterrupted(Exception):
    """A rank's run ended by KeyboardInterrupt, reported to the caller as the rank's failure."""


def _how(code: int) -> str:
    return f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"


def _stop(processes: list[Any]) -> None:
    """End the ranks as Ctrl-C in a terminal would (each ends its run and closes its logs), killing any that are
    still there after the grace period."""
    alive = [p for p in processes if p.is_alive()]
    for p in alive:
        with suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGINT)
    deadline = time.monotonic() + _GRACE_S
    for p in alive:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in alive:
        if p.is_alive():
            p.kill()
            p.join()


class _PortTaken(Exception):
    """Rank 0 could not listen on the rendezvous port: the launch may be tried again on another."""

    def __init__(self, error: RankFailedError) -> None:
        super().__init__(str(error))
        self.error = error


def _raised(error_files: list[str]) -> tuple[int, str] | None:
    """The first local rank that wrote a traceback (torch's spawn wrapper does so when the function raises)."""
    for index, path in enumerate(error_files):
        try:
            with open(path, "rb") as f:
                return index, str(pickle.load(f))
        except (OSError, EOFError, pickle.UnpicklingError):
            continue
    return None
