"""Bagua (``strategy="bagua"``), written against the Bagua 0.9 API for users who have a working Bagua on GPUs.

**Unverified on real Bagua here.** Bagua needs NVIDIA GPUs with NCCL at build and run time, its wheels
(``bagua-cuda116``/``bagua-cuda117``) stop at Python 3.10 and torch 1.x, and it has been unmaintained since 2023.
This glue follows Bagua 0.9.2's sources and is tested against a test double of ``bagua.torch_api``. Its algorithms
run everywhere, CPU included, as xtrain strategies on plain ``torch.distributed``: ``ddp_fp16_compress``,
``ddp_bf16_compress``, ``ddp_int8_compress``, ``local_sgd``, ``decentralized``, ``async_model_averaging``.

How it uses Bagua: the launcher's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``LOCAL_WORLD_SIZE``/``MASTER_*``
variables are exported, ``bagua.torch_api.init_process_group()`` starts Bagua (and the NCCL process group the
watchdog and the collectives use), and once the optimizers exist the module is wrapped in
``bagua.torch_api.data_parallel.DistributedDataParallel(module, optimizers=..., algorithm=...)``, with the
algorithm from ``GlobalAlgorithmRegistry``. ``qadam`` needs a ``QAdamOptimizer``; ``async`` runs background rounds
that are aborted at teardown and resumed by the next fit.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, Literal

import torch
from torch import nn
from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.core.strategy import StepName
from xtrain.strategies._internal.redirect import StepRedirect
from xtrain.strategies.ddp import DDPStrategy

__all__ = ["BaguaAlgorithm", "BaguaStrategy"]

BaguaAlgorithm = Literal["gradient_allreduce", "bytegrad", "decentralized", "low_precision_decentralized", "qadam",
                         "async"]
ALGORITHMS: dict[str, str] = {  # Bagua's algorithm -> the xtrain strategy that does the same on torch.distributed
    "gradient_allreduce": "ddp (or ddp_fp16_compress / ddp_bf16_compress)", "bytegrad": "ddp_int8_compress",
    "decentralized": "decentralized", "low_precision_decentralized": "decentralized",
    "qadam": "ddp_int8_compress", "async": "async_model_averaging"}
_STRATEGY_OPTIONS = ("start_method", "process_group_backend", "timeout", "heartbeat_timeout", "accelerator",
                     "precision", "checkpoint_io", "cluster_environment")


def bagua_or_error(algorithm: str) -> Any:
    """``bagua.torch_api``, or the :class:`ConfigError` that says what Bagua needs and what to use instead."""
    try:
        import bagua.torch_api as bagua
    except ImportError as err:
        raise ConfigError(
            "strategy", "bagua", f"needs Bagua (bagua.torch_api), which is not installed or does not load ({err}). "
            "Bagua runs only on NVIDIA GPUs with NCCL: its wheels (bagua-cuda116/117) stop at Python 3.10 and torch "
            "1.x, building it needs nvcc, NCCL and Rust, and it is unmaintained since 2023.",
            fix=f"use Bagua's algorithms on plain torch.distributed, which run on every backend including CPU: for "
                f"{algorithm!r}, strategy={ALGORITHMS[algorithm]!r}; all of them: 'ddp_fp16_compress', "
                "'ddp_bf16_compress', 'ddp_int8_compress' (bytegrad), 'local_sgd', 'decentralized', "
                "'async_model_averaging'. Or install Bagua on a CUDA machine with Python <= 3.10 "
                "(pip install bagua-cuda116).") from err
    return bagua


class _BaguaForward(nn.Module):
    """The module's forward: the step redirect until the optimizers exist, then Bagua's wrapper around it."""

    def __init__(self, redirect: StepRedirect) -> None:
        super().__init__()
        self.module = redirect
        self.inner: Any = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return (self.inner or self.module)(*args, **kwargs)


class BaguaStrategy(DDPStrategy):
    """Data-parallel training with Bagua's communication algorithms (CUDA + NCCL only; see the module docstring).

    Args:
        algorithm: One of Bagua's algorithms: ``gradient_allreduce``, ``bytegrad``, ``decentralized``,
            ``low_precision_decentralized``, ``qadam`` or ``async``.
        flatten: Flatten Bagua's buckets (``gradient_as_bucket_view``; faster, gradients become views).
        **kwargs: ``start_method``, ``timeout``, ``heartbeat_timeout`` and plugins go to the strategy; everything
            else to the algorithm (e.g. ``hierarchical=False``, ``peer_selection_mode="shift_one"``,
            ``sync_interval_ms=100``).
    """

    name: ClassVar[str] = "bagua"
    supported_accelerators: ClassVar[frozenset[str] | None] = frozenset({"cuda"})

    def __init__(self, *, algorithm: BaguaAlgorithm = "gradient_allreduce", flatten: bool = True,
                 **kwargs: Any) -> None:
        if algorithm not in ALGORITHMS:
            raise ConfigError("algorithm", algorithm, "is not a Bagua algorithm.", choices=list(ALGORITHMS),
                              fix="write algorithm='gradient_allreduce'.")
        bagua_or_error(algorithm)  # before anything starts: strategy="bagua" fails here without it
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in _STRATEGY_OPTIONS}
        super().__init__(**options)
        self.algorithm: BaguaAlgorithm = algorithm
        self.flatten = flatten
        self.algorithm_options = kwargs
        self._forward: _BaguaForward | None = None

    @override
    def setup_environment(self) -> None:
        self.set_world_ranks()
        env = self.environment
        os.environ.update({"MASTER_ADDR": env.main_address, "MASTER_PORT": str(env.main_port),
                           "RANK": str(self.global_rank), "WORLD_SIZE": str(self.world_size),
                           "LOCAL_RANK": str(self.local_rank), "LOCAL_WORLD_SIZE": str(self.processes_per_node),
                           "NODE_RANK": str(self.node_rank)})
        self.accelerator.setup_device(self.root_device)  # Bagua requires torch.cuda.set_device first
        bagua = bagua_or_error(self.algorithm)
        if not bagua.communication.is_initialized():
            bagua.init_process_group()  # also the torch.distributed group the watchdog and collectives use
        self.keep_group_until_exit()
        self.start_watchdog()
        stopped = self._async_algorithm()
        if stopped is not None:  # a second fit: the last teardown aborted Bagua's background averaging
            stopped.resume(self.bagua_module)

    @override
    def wrap_module(self, module: nn.Module) -> nn.Module:
        self._forward = _BaguaForward(StepRedirect(module))
        return self._forward

    @override
    def _release_model(self) -> None:
        super()._release_model()
        self._forward = None  # its DistributedDataParallel holds the group's threads

    @override
    def setup_optimizers(self, optimizers: list[torch.optim.Optimizer]) -> list[torch.optim.Optimizer]:
        running = self._async_algorithm()
        if running is not None:  # each fit configures new optimizers: the old wrapper's averaging stops first
            running.abort(self.bagua_module)
        algorithm = self._make_algorithm(optimizers)
        assert self._forward is not None
        from bagua.torch_api.data_parallel import DistributedDataParallel

        self._forward.inner = DistributedDataParallel(self._forward.module, optimizers=optimizers, algorithm=algorithm,
                                                      gradient_as_bucket_view=self.flatten)
        return optimizers

    def _make_algorithm(self, optimizers: list[torch.optim.Optimizer]) -> Any:
        from bagua.torch_api.algorithms import GlobalAlgorithmRegistry

        options = dict(self.algorithm_options)
        if self.algorithm == "qadam":
            from bagua.torch_api.algorithms.q_adam import QAdamOptimizer

            if len(optimizers) != 1 or not isinstance(optimizers[0], QAdamOptimizer):
                raise ConfigError("configure_optimizers", [type(o).__name__ for o in optimizers],
                                  "Bagua's qadam algorithm needs exactly one QAdamOptimizer.",
                                  fix="return bagua.torch_api.algorithms.q_adam.QAdamOptimizer(self.parameters(), "
                                      "lr=...) from configure_optimizers.")
            options["q_adam_optimizer"] = optimizers[0]
        return GlobalAlgorithmRegistry.get(self.algorithm)(**options)

    @property
    def bagua_module(self) -> Any:
        """Bagua's ``DistributedDataParallel`` (``None`` before the optimizers are set up)."""
        return self._forward.inner if self._forward is not None else None

    @override
    def run_step(self, name: StepName, *args: Any, **kwargs: Any) -> Any:
        if name == "training_step" and torch.is_grad_enabled() and \
                not self.module.automatic_optimization:  # type: ignore[attr-defined]
            raise ConfigError("strategy", "bagua", "does not support manual optimization: Bagua's algorithms hook "
                              "into the backward pass and the optimizer step themselves.",
                              fix="use automatic optimization, or strategy='ddp'.")
        return super().run_step(name, *args, **kwargs)

    @override
    def no_backward_sync(self, enabled: bool = True, *, module: nn.Module | None = None) -> Any:
        inner = self.bagua_module
        if enabled and inner is not None:
            return inner.no_sync()
        return super().no_backward_sync(False)

    def _async_algorithm(self) -> Any:
        inner = self.bagua_module
        return inner.bagua_algorithm if self.algorithm == "async" and inner is not None else None

    @override
    def teardown(self) -> None:
        running = self._async_algorithm()
        if running is not None:
            running.abort(self.bagua_module)  # stop the background averaging before anything else goes away
        super().teardown()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(algorithm={self.algorithm!r})"
