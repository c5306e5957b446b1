"""Model averaging instead of gradient averaging: Bagua's ``decentralized`` and local SGD, on plain torch.distributed.

Each rank trains its own replica with its own gradients (no all-reduce in the backward pass) and the replicas are
averaged every ``period`` optimizer steps, which divides the communication by ``period`` (local SGD, a.k.a. periodic
model averaging). With ``peers="ring"`` each rank averages with one peer per round instead of with everyone, on a
ring whose shift changes every round (Bagua's ``decentralized`` with ``shift_one``): the same bytes per rank, but
no rank waits for all the others.

* ``local_sgd``: every 8 steps, with everyone (``period``, ``peers``, ``warmup_steps`` change that).
* ``decentralized``: every step, with one peer.

The first ``warmup_steps`` optimizer steps average gradients as DDP does (training often needs synchronized
replicas early). At the end of every epoch's batches (the fit loop's ``join``) and when the strategy is torn down
(the Engine), replicas that moved since their last averaging are averaged with everyone, so validation, epoch-end
checkpoints and the trained model are one model. Mid-epoch checkpoints hold rank 0's replica. The periodic
averaging happens in optimizer hooks, so it works the same under the Trainer and the Engine;
``strategy.communication`` counts the bytes each rank sent.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
import torch.distributed as dist
from torch import nn
from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.core.launcher import Launcher
from xtrain.core.parallel import ParallelStrategy
from xtrain.strategies._internal.averaging import (
    average_gradients,
    average_with_all,
    average_with_peer,
    broadcast_from_zero,
    model_tensors,
)
from xtrain.strategies._internal.caller_failure import report_caller_failure
from xtrain.strategies._internal.comm_hooks import CommStats
from xtrain.strategies.launchers import launcher_for

__all__ = ["DecentralizedStrategy", "LocalSGDStrategy", "Peers", "ReplicaStrategy"]

Peers = Literal["all", "ring"]
StartMethod = Literal["popen", "spawn", "fork"]


class ReplicaStrategy(ParallelStrategy):
    """Base of the strategies whose ranks train replicas that are averaged now and then (no DDP wrapper).

    Args:
        warmup_steps: Optimizer steps that average gradients (plain data parallel) before replicas go their way.
        average_each_epoch: Average the replicas at the end of every epoch's batches and at teardown, so every rank
            validates, checkpoints and ends with the same model (``False``: only at teardown).
        start_method: ``"popen"`` (re-run the script), ``"spawn"`` or ``"fork"``, as for DDP.
        **kwargs: ``process_group_backend``, ``timeout``, ``heartbeat_timeout`` and plugins.
    """

    name: ClassVar[str] = "replicas"
    # Averaging happens on optimizer steps, and 16-mixed's gradient scaler skips steps on some ranks but not others.
    supported_precisions: ClassVar[frozenset[str] | None] = frozenset(
        {"32-true", "64-true", "bf16-mixed", "16-true", "bf16-true"})
    # Between averaging points the ranks hold different replicas, and a checkpoint keeps rank 0's.
    resumes_exactly: ClassVar[bool] = False

    def __init__(self, *, warmup_steps: int = 0, average_each_epoch: bool = True,
                 start_method: StartMethod = "popen", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if warmup_steps < 0:
            raise ConfigError("warmup_steps", warmup_steps, "must be 0 or more.", fix="write warmup_steps=0.")
        if start_method not in ("popen", "spawn", "fork"):
            raise ConfigError("start_method", start_method, "is not a start method.",
                              choices=["popen", "spawn", "fork"], fix="write start_method='popen'.")
        self.warmup_steps = warmup_steps
        self.average_each_epoch = average_each_epoch
        self.start_method: StartMethod = start_method
        self.communication = CommStats()
        self.steps = 0
        self._averaged_at = 0
        self._launcher: Launcher | None = None
        self._failed = False

    @property
    @override
    def launcher(self) -> Launcher | None:
        if self._launcher is None and self._cluster_environment is not None and \
                not self.environment.creates_processes_externally:
            self._launcher = launcher_for(self.start_method, num_processes=len(self.parallel_devices),
                                          num_nodes=self.num_nodes, environment=self.environment)
        return self._launcher

    @override
    def setup(self, module: nn.Module) -> nn.Module:
        model = super().setup(module)
        if self.world_size > 1:
            broadcast_from_zero(list(self.module.state_dict().values()))  # every replica starts from rank 0's
        return model

    @override
    def setup_optimizers(self, optimizers: list[torch.optim.Optimizer]) -> list[torch.optim.Optimizer]:
        for optimizer in optimizers:
            optimizer.register_step_pre_hook(self._before_step)
            optimizer.register_step_post_hook(self._after_step)
        return optimizers

    def _before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.steps < self.warmup_steps and self.world_size > 1:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            average_gradients(params, stats=self.communication)

    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.steps += 1
        if self.steps <= self.warmup_steps:
            self._averaged_at = self.steps  # gradients were averaged: the replicas are still one model
        elif self.world_size > 1:
            self.after_local_step(self.steps - self.warmup_steps)

    def after_local_step(self, local_steps: int) -> None:
        """Called after each optimizer step past the warm-up, with how many there were."""

    def average_all(self) -> None:
        """Average every replica with every other (collective: every rank calls it)."""
        average_with_all(model_tensors(self.module), stats=self.communication)
        self._averaged_at = self.steps

    def _moved(self) -> bool:
        """Whether replicas may differ: steps since the last full average (equal on every rank)."""
        return self.world_size > 1 and self._module is not None and self.steps != self._averaged_at

    @override
    def join(self) -> int | None:
        if self.average_each_epoch and self._moved():
            self.average_all()
        return None

    @override
    def on_exception(self, exception: BaseException) -> None:
        self._failed = True
        report_caller_failure(self._launcher, exception)
        super().on_exception(exception)

    @override
    def teardown(self) -> None:
        if not self._failed and self._moved() and dist.is_initialized():
            self.average_all()
        super().teardown()


class LocalSGDStrategy(ReplicaStrategy):
    """Local SGD: replicas train alone and are averaged every ``period`` optimizer steps.

    Args:
        period: Optimizer steps between averagings (communication is divided by it).
        peers: ``"all"`` (all-reduce) or ``"ring"`` (one peer per round, gossip).
        **kwargs: ``warmup_steps``, ``average_each_epoch``, ``start_method`` and the ParallelStrategy options.
    """

    name: ClassVar[str] = "local_sgd"
    default_period: ClassVar[int] = 8
    default_peers: ClassVar[Peers] = "all"

    def __init__(self, *, period: int | None = None, peers: Peers | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.period = self.default_period if period is None else period
        self.peers: Peers = peers or self.default_peers
        if self.period < 1:
            raise ConfigError("period", self.period, "must be at least 1 optimizer step.", fix="write period=8.")
        if self.peers not in ("all", "ring"):
            raise ConfigError("peers", self.peers, "is not a way to pick averaging partners.", choices=["all", "ring"],
                              fix="write peers='all' (everyone) or peers='ring' (one peer per round).")
        self.rounds = 0

    @override
    def after_local_step(self, local_steps: int) -> None:
        if local_steps % self.period:
            return
        if self.peers == "all":
            self.average_all()
        else:
            average_with_peer(model_tensors(self.module), round_index=self.rounds, stats=self.communication)
        self.rounds += 1

    def __repr__(self) -> str:
        return f"{type(self).__name__}(period={self.period}, peers={self.peers!r})"


class DecentralizedStrategy(LocalSGDStrategy):
    """Decentralized SGD (Bagua's ``decentralized``): after every step, average with one peer on a shifting ring."""

    name: ClassVar[str] = "decentralized"
    default_period: ClassVar[int] = 1
    default_peers: ClassVar[Peers] = "ring"
