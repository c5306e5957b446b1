"""Asynchronous model averaging (Bagua's ``async``) on plain torch.distributed.

Ranks never wait for each other to step: a background thread on each rank averages the replicas every
``interval_ms`` over its own gloo process group, while training goes on. A round copies the weights (under a lock
the optimizer step also takes), all-reduces the copy, then adds ``average - copy`` to the weights, keeping the local
progress made while the round was in flight. The forward and backward passes do not take the lock: like Hogwild,
they may read weights a round is updating.

Rounds pair up across ranks by order (the k-th round of every rank is one all-reduce). To stop, a rank marks its
next round; every rank sees the mark in that round's result and ends after it, so no round is left unmatched. That
happens at the end of every epoch's batches and at teardown, followed by one synchronous average, so validation,
epoch-end checkpoints and the trained model are one model; the next step starts the background rounds again.

The all-reduce runs on CPU copies (gloo), whatever the device: it works everywhere and leaves the device's own
process group to the training loop. Its message is float32 by construction: the thread must not create tensors
with torch's default dtype, which ``-true`` precisions switch (process-wide) around every step, so two ranks would
otherwise send rounds of different sizes (gloo aborts with "Received data size doesn't match expected size").
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.strategies._internal.averaging import model_tensors
from xtrain.strategies.averaging import ReplicaStrategy

__all__ = ["AsyncModelAveragingStrategy"]


class AsyncModelAveragingStrategy(ReplicaStrategy):
    """Replicas averaged by a background thread every ``interval_ms``, without blocking training.

    Args:
        interval_ms: Pause between averaging rounds.
        **kwargs: ``warmup_steps`` (gradient averaging first), ``average_each_epoch``, ``start_method`` and the
            ParallelStrategy options.
    """

    name: ClassVar[str] = "async_model_averaging"

    def __init__(self, *, interval_ms: float = 100.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if interval_ms < 0:
            raise ConfigError("interval_ms", interval_ms, "must be 0 or more milliseconds.", fix="write 100.")
        self.interval_ms = interval_ms
        self.rounds = 0
        self._group: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Picklable for ``start_method="spawn"``: the thread, its lock and events are made anew in each process."""
        state = dict(self.__dict__)
        for key in ("_lock", "_stop", "_thread", "_group", "_error"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock, self._stop, self._thread, self._group, self._error = (threading.Lock(), threading.Event(), None,
                                                                          None, None)

    @override
    def setup_environment(self) -> None:
        super().setup_environment()
        if self._group is None and self.world_size > 1:
            self._group = dist.new_group(backend="gloo")  # collective: every rank creates it at the same point

    @override
    def _before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        super()._before_step(optimizer, args, kwargs)
        self._lock.acquire()

    @override
    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._lock.release()
        super()._after_step(optimizer, args, kwargs)

    @override
    def after_local_step(self, local_steps: int) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="xtrain-async-averaging", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        tensors = model_tensors(self.module)
        try:
            while True:
                self._stop.wait(self.interval_ms / 1000)
                if self._round(tensors, stop=self._stop.is_set()):
                    return
        except BaseException as err:  # noqa: BLE001 - a dead peer; the watchdog ends the run and reports it
            self._error = err

    @torch.no_grad()
    def _round(self, tensors: list[torch.Tensor], *, stop: bool) -> bool:
        """One averaging round; returns whether any rank asked to stop in it."""
        with self._lock:
            message = _round_message(tensors, stop=stop)
        snapshot = message[:-1].clone()
        self.communication.add(message)
        dist.all_reduce(message, group=self._group)
        delta = message[:-1] / self.world_size - snapshot
        with self._lock:
            offset = 0
            for t in tensors:
                t.add_(delta[offset:offset + t.numel()].view_as(t).to(t.device, t.dtype))
                offset += t.numel()
        self.rounds += 1
        return bool(message[-1] > 0)

    def stop_averaging(self) -> None:
        """End the background rounds together with the other ranks (each rank calls it when it stops training)."""
        if self._thread is not None:
            self._stop.set()
            while self._thread.is_alive():
                self._thread.join(timeout=0.5)
            self._thread = None
            if self._error is not None:
                error, self._error = self._error, None
                raise RuntimeError("asynchronous model averaging failed") from error

    @override
    def join(self) -> int | None:
        if self.average_each_epoch:
            self.stop_averaging()  # the next step starts a new background thread
        return super().join()

    @override
    def teardown(self) -> None:
        if not self._failed:
            self.stop_averaging()
        super().teardown()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(interval_ms={self.interval_ms})"


def _round_message(tensors: list[torch.Tensor], *, stop: bool) -> torch.Tensor:
    """The float32 CPU vector a round all-reduces: every weight, then the stop mark (1.0 asks every rank to stop).

    Every dtype is explicit, so the message has the same size on every rank whatever the default dtype is.
    """
    mark = torch.tensor([1.0 if stop else 0.0], dtype=torch.float32)
    return torch.cat([*(t.detach().reshape(-1).to("cpu", torch.float32) for t in tensors), mark])
