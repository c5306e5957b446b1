"""ParallelStrategy: the base of strategies built on ``torch.distributed`` process groups.

It owns what DDP, FSDP and the other process-group strategies share: ranks from the cluster environment, the
process group on the accelerator's declared backend, collectives, distributed sampling and the fail-fast watchdog.
Subclasses add how the module is wrapped and how processes are launched.
"""

from __future__ import annotations

import atexit
import functools
import gc
import itertools
import os
import sys
import traceback
import weakref
from abc import ABC
from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar, TypeVar

import torch
import torch.distributed as dist
from typing_extensions import override

from xtrain.core._internal import collective_check
from xtrain.core._internal.attempt_store import attempt_store
from xtrain.core._internal.error_chain import in_chain
from xtrain.core._internal.import_watch import watch_import
from xtrain.core._internal.pickling import object_to_tensor, tensor_to_object
from xtrain.core._internal.progress_signal import PROGRESS
from xtrain.core._internal.watchdog import Watchdog
from xtrain.core.environment import ClusterEnvironment
from xtrain.core.errors import ConfigError, SIGTERMException
from xtrain.core.rank_zero import rank_zero_warn
from xtrain.core.strategy import ReduceOp, Strategy

__all__ = ["ParallelStrategy"]

_T = TypeVar("_T")
_RENDEZVOUS_NOTICE_S = 30.0
_OPS = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
_generation = itertools.count()
_SET_UP: weakref.WeakSet[ParallelStrategy] = weakref.WeakSet()  # strategies whose models may hold the group
# torch 2.13 renamed all_gather_into_tensor (and warns on the old name); older releases only have the old one.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class ParallelStrategy(Strategy, ABC):
    """One process per device, communicating through a ``torch.distributed`` process group.

    Args:
        process_group_backend: Override the accelerator's declared backend (e.g. ``"gloo"`` on GPUs).
        timeout: Timeout of collectives; failures are normally caught much sooner by the watchdog.
        heartbeat_timeout: Seconds without a heartbeat before a rank counts as gone (default 6, or
            ``XTRAIN_HEARTBEAT_TIMEOUT``).
        **kwargs: Plugins, as for :class:`~xtrain.core.strategy.Strategy`.
    """

    needs_dist_backend: ClassVar[bool] = True

    def __init__(self, *, process_group_backend: str | None = None, timeout: timedelta = timedelta(minutes=30),
                 heartbeat_timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.process_group_backend = process_group_backend
        self.timeout = timeout
        self.heartbeat_timeout = heartbeat_timeout
        self._watchdog: Watchdog | None = None
        self._abort_handlers: list[Callable[[], None]] = []

    @property
    def environment(self) -> ClusterEnvironment:
        env = self.cluster_environment
        if env is None:
            raise ConfigError("plugins", None, f"{self.name!r} needs a cluster environment.",
                              fix="let Trainer(...) or Engine(...) resolve the strategy.")
        return env

    @override
    def connect(self, **kwargs: Any) -> None:
        super().connect(**kwargs)
        self.set_world_ranks()

    @property
    @override
    def processes_per_node(self) -> int:
        return len(self.parallel_devices)

    def set_world_ranks(self) -> None:
        """Tell the environment the world size and this process's rank (environments that know them ignore it)."""
        env = self.environment
        per_node = self.processes_per_node
        env.set_world_size(per_node * self.num_nodes)
        env.set_global_rank(env.node_rank() * per_node + env.local_rank())

    @property
    @override
    def global_rank(self) -> int:
        return self.environment.global_rank()

    @property
    @override
    def local_rank(self) -> int:
        return self.environment.local_rank()

    @property
    @override
    def node_rank(self) -> int:
        return self.environment.node_rank()

    @property
    @override
    def world_size(self) -> int:
        return self.environment.world_size()

    @property
    @override
    def root_device(self) -> torch.device:
        return self.parallel_devices[self.local_rank % len(self.parallel_devices)]

    @property
    @override
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    @property
    def backend(self) -> str:
        backend = self.process_group_backend or self.accelerator.dist_backend
        assert backend is not None
        return backend

    # -- process group and watchdog -----------------------------------------------------------------------------
    @override
    def setup_environment(self) -> None:
        self.set_world_ranks()
        self.accelerator.setup_device(self.root_device)
        if not dist.is_initialized():
            env = self.environment
            os.environ["MASTER_ADDR"] = env.main_address
            os.environ["MASTER_PORT"] = str(env.main_port)
            waiting = watch_import(_RENDEZVOUS_NOTICE_S, self._rendezvous_notice(env.main_address, env.main_port))
            try:
                dist.init_process_group(self.backend, rank=self.global_rank, world_size=self.world_size,
                                        timeout=self.timeout, store=attempt_store(self.timeout))
            finally:
                waiting.cancel()
        self.keep_group_until_exit()
        self.start_watchdog()

    def _rendezvous_notice(self, address: str, port: int) -> str:
        """What a rank prints when the other processes have not joined after a while (a node never started, or
        started with another address): otherwise it waits silently up to the process-group timeout."""
        nodes = (f" The other nodes must start with MASTER_ADDR={address}, MASTER_PORT={port} and their own NODE_RANK "
                 f"(0 to {self.num_nodes - 1}), or be started by torchrun or SLURM; a node that did start may have "
                 f"failed before joining: look at its output."
                 if self.num_nodes > 1 else "")
        return (f"xtrain: rank {self.global_rank} has waited {_RENDEZVOUS_NOTICE_S:g} s for all {self.world_size} "
                f"processes to join at {address}:{port} (node {self.node_rank} of {self.num_nodes}).{nodes} It waits "
                f"up to the process-group timeout ({self.timeout}), then fails.")

    def keep_group_until_exit(self) -> None:
        """Keep the process group for later fits in this process, and at exit drop this strategy's model, then
        destroy the group while Python still runs: a group left to static destructors (or a wrapped model holding
        it) can abort the process ("terminate called without an active exception") after training succeeded.
        Strategies that create the group themselves (Bagua) call it once it exists."""
        _release_group_at_exit()  # registered once, holding no strategy: a Trainer deleted after fit is freed
        _SET_UP.add(self)

    def _release_model(self) -> None:
        """Drop the wrapped model (DDP holds the group and its threads), so the group can be destroyed."""
        self._model = None

    def watchdog_store(self) -> Any:
        """The store the watchdog uses: a fresh prefix per run on the default group's store."""
        store = dist.distributed_c10d._get_default_store()
        return dist.PrefixStore(f"xtrain/watchdog/{next(_generation)}/", store)  # type: ignore[attr-defined]

    def start_watchdog(self) -> None:
        if self.world_size > 1 and self._watchdog is None:
            self._watchdog = Watchdog(self.watchdog_store(), rank=self.global_rank, world_size=self.world_size,
                                      dead_after=self.heartbeat_timeout, on_abort=self._run_abort_handlers,
                                      hang_timeout=self.hang_timeout,
                                      collective_timeout=self.timeout.total_seconds(), global_step=self._global_step)
            self._watchdog.start()
            collective_check.install(self.watchdog_store(), rank=self.global_rank, world_size=self.world_size)

    def _global_step(self) -> int | None:
        """The Trainer's global step, read by the watchdog thread for a hang report (``None`` under the Engine)."""
        trainer = getattr(self._module, "_trainer", None)
        step = getattr(trainer, "global_step", None)
        return step if isinstance(step, int) else None

    @override
    def set_hang_timeout(self, timeout: float | None) -> None:
        """Keep the setting, and warn when it cannot work: at or above the process-group timeout, torch's timeout
        error (which blames a waiting, healthy rank and shows no stacks) comes before any hang report."""
        super().set_hang_timeout(timeout)
        collective = self.timeout.total_seconds()
        if timeout is not None and timeout >= collective:
            rank_zero_warn(f"hang_timeout={timeout:g} s is not below the strategy's process-group timeout "
                           f"({collective:g} s, {type(self).__name__}(timeout=...)): a rank that hangs is then ended "
                           f"by torch's timeout error on a waiting rank, without a hang report. Set hang_timeout "
                           f"below {collective:g} s, or raise the strategy's timeout, e.g. "
                           f"{type(self).__name__}(timeout=timedelta(seconds={2 * timeout:g})).",
                           stacklevel=3)  # the user's Trainer(...) or Engine(...) line

    @override
    def add_abort_handler(self, handler: Callable[[], None]) -> None:
        if handler not in self._abort_handlers:
            self._abort_handlers.append(handler)

    def _run_abort_handlers(self) -> None:
        for handler in self._abort_handlers:
            try:
                handler()
            except Exception:  # noqa: BLE001 - the process is ending; the others still get their turn
                pass

    def stop_watchdog(self) -> None:
        """Finish watching together: no rank stops before every rank got here, and a rank that exits right after
        (taking the store with it) is not mistaken for a crash by the others."""
        if self._watchdog is not None:
            self._watchdog.begin_shutdown()
            collective_check.uninstall()
            if not self._watchdog.reported_failure:  # its peers are being ended: a barrier would fail (or hang),
                self.barrier("watchdog-stop")  # and that error would replace the one the user must see
            self._watchdog.stop()
            self._watchdog = None

    @override
    def on_exception(self, exception: BaseException) -> None:
        collective_check.uninstall()  # the run is over: its last collectives need not match
        if self._watchdog is not None and isinstance(exception, (KeyboardInterrupt, SIGTERMException)):
            # Stopped from outside, not failed: the other ranks say so and exit with the signal's code.
            if isinstance(exception, KeyboardInterrupt) and self.global_rank == 0:  # Ctrl-C reaches every rank
                print("xtrain: detected KeyboardInterrupt, attempting graceful shutdown.", file=sys.stderr, flush=True)
            self._watchdog.report_interrupt("SIGINT" if isinstance(exception, KeyboardInterrupt) else "SIGTERM")
        elif self._watchdog is not None:
            details = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
            self._watchdog.report_failure(details, caused_by_peer=_peer_failure(exception))

    @override
    def teardown(self) -> None:
        self.stop_watchdog()
        super().teardown()

    # -- collectives --------------------------------------------------------------------------------------------
    def _on_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.detach().to(self.root_device).clone()

    @override
    def reduce(self, tensor: torch.Tensor, op: ReduceOp = "mean") -> torch.Tensor:
        return self._reduce_in_group(tensor, op)

    def _reduce_in_group(self, tensor: torch.Tensor, op: ReduceOp, *, group: Any = None,
                         label: str = "all_reduce") -> torch.Tensor:
        """:meth:`reduce` over the process group ``group`` (default: every rank), for strategies that reduce some
        values over a sub-group; ``label`` names the collective in a hang report."""
        if op not in _OPS:
            raise ConfigError("op", op, "is not a reduction.", choices=list(_OPS), fix="pass op='mean'.")
        result = self._on_device(tensor)
        if op == "mean" and not result.is_floating_point():
            result = result.float()
        with PROGRESS.collective(label, result):
            dist.all_reduce(result, op=_OPS[op], group=group)
        if op == "mean":
            result /= self.world_size if group is None else dist.get_world_size(group)
        return result

    @override
    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        local = self._on_device(tensor).contiguous()
        # Gathered flat: gloo splits the output along dim 0 and refuses a 0-dim input gathered into (world,).
        out = torch.empty((self.world_size * local.numel(),), dtype=local.dtype, device=local.device)
        with PROGRESS.collective("all_gather", local):
            _all_gather_single(out, local.reshape(-1))
        return out.reshape(self.world_size, *local.shape)

    @override
    def broadcast(self, obj: _T, src: int = 0) -> _T:
        if self.world_size == 1:
            return obj
        device = self._object_device()
        data = object_to_tensor(obj, device) if self.global_rank == src else None
        size = torch.tensor([0 if data is None else data.numel()], dtype=torch.long, device=device)
        with PROGRESS.collective(f"broadcast(src={src})", size):
            dist.broadcast(size, src=src)
            if data is None:
                data = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
            dist.broadcast(data, src=src)
        return tensor_to_object(data)  # type: ignore[no-any-return]

    @override
    def all_gather_object(self, obj: _T) -> list[_T]:
        if self.world_size == 1:
            return [obj]
        device = self._object_device()
        data = object_to_tensor(obj, device)
        sizes = self.all_gather(torch.tensor(data.numel(), dtype=torch.long, device=device))
        padded = torch.zeros(int(sizes.max().item()), dtype=torch.uint8, device=device)
        padded[: data.numel()] = data
        gathered = self.all_gather(padded)
        return [tensor_to_object(gathered[i, : int(sizes[i].item())]) for i in range(self.world_size)]

    @override
    def start_boolean_decision(self, decision: bool, *, all: bool = True) -> Callable[[], bool]:
        if self.world_size == 1:
            return lambda: decision
        flag = torch.tensor(int(decision), device=self.root_device)
        with PROGRESS.collective("all_reduce (a decision every rank takes together)", flag):
            work = dist.all_reduce(flag, op=dist.ReduceOp.SUM, async_op=True)

        def result() -> bool:
            if work is not None:
                with PROGRESS.collective("all_reduce (a decision every rank takes together)", checked=False):
                    work.wait()
            total = int(flag.item())
            return total == self.world_size if all else total > 0

        return result

    def _object_device(self) -> torch.device:
        return self.root_device if self.backend == "nccl" else torch.device("cpu")

    @override
    def barrier(self, name: str | None = None) -> None:
        if not dist.is_initialized() or self.world_size == 1:
            return
        with PROGRESS.collective(f"barrier({name!r})" if name else "barrier"):
            if self.backend == "nccl" and self.root_device.index is not None:
                dist.barrier(device_ids=[self.root_device.index])
            else:
                dist.barrier()


@functools.cache
def _release_group_at_exit() -> None:
    atexit.register(_release_at_exit)


def _release_at_exit() -> None:
    """Drop the wrapped models still alive and destroy the group while Python runs."""
    for strategy in list(_SET_UP):
        strategy._release_model()
    gc.collect()
    _destroy_process_group()
    gc.collect()


def _destroy_process_group() -> None:
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


_PEER_GONE = ("closed by peer", "reset by peer", "broken pipe", "remote worker", "communicator was aborted")


def _peer_failure(exception: BaseException) -> bool:
    """Whether a collective failed because another rank died (the cause is theirs, not this rank's)."""
    return in_chain(exception, lambda seen: any(marker in str(seen).lower() for marker in _PEER_GONE))
